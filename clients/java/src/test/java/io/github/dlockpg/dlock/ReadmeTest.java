// ReadmeTest: README.md's examples as a new user would run them: each
// ```java block is a whole program, compiled against the client and the
// JDBC driver, and run in a JVM of its own with DLOCK_JDBC_URL set; it
// must exit 0 (the quick start: and say it held the lock). One that opens
// a session is skipped where the server's dlock has none.
// Promises: none
package io.github.dlockpg.dlock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import javax.tools.ToolProvider;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.TestFactory;

class ReadmeTest {
    @TestFactory
    List<DynamicTest> readmeExamples() throws Exception {
        String readme = Files.readString(Path.of("README.md"));
        Matcher m = Pattern.compile("(?ms)^```java\\n(.*?)^```$").matcher(readme);
        List<DynamicTest> tests = new ArrayList<>();
        while (m.find()) {
            String code = m.group(1);
            Matcher cls = Pattern.compile("public class (\\w+)").matcher(code);
            assertTrue(cls.find(), "each java block is a whole program: " + code);
            String name = cls.group(1);
            tests.add(DynamicTest.dynamicTest("README example " + name, () -> run(name, code)));
        }
        assertFalse(tests.isEmpty(), "README.md has java examples");
        return tests;
    }

    private static void run(String name, String code) throws Exception {
        if (code.contains("DlockSession")) SessionTest.needSessions();
        Path dir = Files.createTempDirectory("dlock-example-");
        Path src = dir.resolve(name + ".java");
        Files.writeString(src, code);
        String cp = System.getProperty("java.class.path");
        int rc = ToolProvider.getSystemJavaCompiler().run(null, null, null,
            "--release", "17", "-cp", cp, "-d", dir.toString(), src.toString());
        assertEquals(0, rc, "javac " + name);
        String java = ProcessHandle.current().info().command().orElse("java");
        ProcessBuilder pb = new ProcessBuilder(java, "-cp", dir + ":" + cp, name).redirectErrorStream(true);
        pb.environment().put("DLOCK_JDBC_URL", "jdbc:postgresql://" + TestEnv.env("PGHOST", "127.0.0.1") + ":"
            + TestEnv.env("PGPORT", "5432") + "/" + TestEnv.env("PGDATABASE", "postgres") + "?user="
            + TestEnv.env("PGUSER", System.getProperty("user.name")));
        Process p = pb.start();
        assertTrue(p.waitFor(60, TimeUnit.SECONDS), name + " finished");
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertEquals(0, p.exitValue(), name + " exited 0; its output:\n" + out);
        if (name.equals("Quickstart")) assertTrue(out.startsWith("holding nightly-report, fence "), out);
    }
}
