// TapRunner: runs the JUnit 5 tests of this package in this JVM and
// prints one TAP line per test ("ok N - Class: name", "not ok", "# SKIP"),
// then the plan; exit 1 if any failed.  050_java.t reads it.  Arguments:
// test classes (or Class#method) to run instead of all.
package io.github.dlockpg.dlock;

import static org.junit.platform.engine.discovery.DiscoverySelectors.selectClass;
import static org.junit.platform.engine.discovery.DiscoverySelectors.selectMethod;
import static org.junit.platform.engine.discovery.DiscoverySelectors.selectPackage;

import java.io.PrintWriter;
import java.io.StringWriter;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.platform.engine.TestExecutionResult;
import org.junit.platform.engine.DiscoverySelector;
import org.junit.platform.launcher.Launcher;
import org.junit.platform.launcher.TestExecutionListener;
import org.junit.platform.launcher.TestIdentifier;
import org.junit.platform.launcher.TestPlan;
import org.junit.platform.launcher.core.LauncherDiscoveryRequestBuilder;
import org.junit.platform.launcher.core.LauncherFactory;

public final class TapRunner {
    public static void main(String[] args) {
        List<DiscoverySelector> sel = new ArrayList<>();
        for (String a : args)
            sel.add(a.contains("#") ? selectMethod("io.github.dlockpg.dlock." + a) : selectClass("io.github.dlockpg.dlock." + a));
        if (sel.isEmpty()) sel.add(selectPackage("io.github.dlockpg.dlock"));
        AtomicInteger n = new AtomicInteger();
        AtomicInteger failed = new AtomicInteger();
        Launcher launcher = LauncherFactory.create();
        var request = LauncherDiscoveryRequestBuilder.request().selectors(sel).build();
        TestPlan[] plan = new TestPlan[1];
        launcher.execute(request, new TestExecutionListener() {
            @Override
            public void testPlanExecutionStarted(TestPlan p) {
                plan[0] = p;
            }

            private String name(TestIdentifier id) {
                String cls = plan[0].getParent(id).map(TestIdentifier::getDisplayName).orElse("?");
                return (cls + ": " + id.getDisplayName()).replace('\n', ' ').replace("#", "");
            }

            @Override
            public void executionSkipped(TestIdentifier id, String reason) {
                if (!id.isTest()) return;
                System.out.println("ok " + n.incrementAndGet() + " - " + name(id) + " # SKIP " + reason);
                System.out.flush();
            }

            @Override
            public void executionFinished(TestIdentifier id, TestExecutionResult r) {
                if (!id.isTest()) {
                    if (r.getStatus() != TestExecutionResult.Status.SUCCESSFUL) {
                        failed.incrementAndGet();
                        System.out.println("not ok " + n.incrementAndGet() + " - " + id.getDisplayName()
                            + " (container)");
                        diag(r);
                    }
                    return;
                }
                boolean ok = r.getStatus() == TestExecutionResult.Status.SUCCESSFUL;
                if (r.getStatus() == TestExecutionResult.Status.ABORTED) {
                    System.out.println("ok " + n.incrementAndGet() + " - " + name(id) + " # SKIP "
                        + r.getThrowable().map(Throwable::getMessage).orElse("aborted"));
                    System.out.flush();
                    return;
                }
                if (!ok) failed.incrementAndGet();
                System.out.println((ok ? "ok " : "not ok ") + n.incrementAndGet() + " - " + name(id));
                if (!ok) diag(r);
                System.out.flush();
            }

            private void diag(TestExecutionResult r) {
                r.getThrowable().ifPresent(t -> {
                    StringWriter w = new StringWriter();
                    t.printStackTrace(new PrintWriter(w));
                    for (String l : w.toString().split("\n")) System.out.println("# " + l);
                });
            }
        });
        System.out.println("1.." + n.get());
        System.out.flush();
        System.exit(failed.get() > 0 ? 1 : 0);
    }
}
