// LostAnswerTest: an unlock() whose answer is lost after it committed is
// not sent again, at once or (while another lock of its session holds the
// resource) by the next lock(): sent again, it would take a second count
// of a holding two lock objects share through one holder text, and the
// other would think it held a lock anyone can take.
// Promises: P16
package io.github.dlockpg.dlock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.time.Duration;
import java.util.concurrent.atomic.AtomicInteger;
import javax.sql.DataSource;
import org.junit.jupiter.api.DisplayName;
import org.junit.jupiter.api.Test;

class LostAnswerTest {
    /**
     * REAL, whose dlock.unlock statements run (SENT counts them), then,
     * while ARMED is above zero (one less each), fail as a connection lost
     * before the answer does (08006).
     */
    private static DataSource answerLost(DataSource real, AtomicInteger armed, AtomicInteger sent) {
        return (DataSource) Proxy.newProxyInstance(DataSource.class.getClassLoader(), new Class<?>[] {DataSource.class},
            (p, m, a) -> {
                Object out = call(real, m, a);
                if (!m.getName().equals("getConnection")) return out;
                Connection c = (Connection) out;
                return Proxy.newProxyInstance(Connection.class.getClassLoader(), new Class<?>[] {Connection.class},
                    (pc, mc, ac) -> {
                        Object o = call(c, mc, ac);
                        if (!mc.getName().equals("prepareStatement") || !((String) ac[0]).contains("dlock.unlock("))
                            return o;
                        PreparedStatement ps = (PreparedStatement) o;
                        return Proxy.newProxyInstance(PreparedStatement.class.getClassLoader(),
                            new Class<?>[] {PreparedStatement.class}, (pp, mp, ap) -> {
                                Object r = call(ps, mp, ap);
                                if (mp.getName().equals("executeQuery")) {
                                    sent.incrementAndGet();
                                    if (armed.getAndDecrement() > 0)
                                        throw new SQLException("injected: connection lost before the answer", "08006");
                                }
                                return r;
                            });
                    });
            });
    }

    private static Object call(Object target, java.lang.reflect.Method m, Object[] a) throws Throwable {
        try {
            return m.invoke(target, a);
        } catch (InvocationTargetException e) {
            throw e.getCause();
        }
    }

    private static int count(String r) throws SQLException {
        Object n = TestEnv.adminQuery("SELECT coalesce(max(count), 0) FROM dlock.locks "
            + "WHERE resource = ? AND holder IS NOT NULL", r);
        return ((Number) n).intValue();
    }

    @Test
    @DisplayName("an unlock() whose answer was lost is not sent again")
    void lostAnswerNotSentAgain() throws Exception {
        String r = TestEnv.unique("lost-release"), holder = TestEnv.unique("shared-holder");
        AtomicInteger armed = new AtomicInteger(1000), sent = new AtomicInteger();
        DlockLock a = DlockLock.builder(answerLost(TestEnv.app(), armed, sent), r).holder(holder)
            .lease(Duration.ofMinutes(1)).build();
        DlockLock b = DlockLock.builder(TestEnv.app(), r).holder(holder).lease(Duration.ofMinutes(1)).build();
        assertTrue(a.tryLock());
        assertTrue(b.tryLock());
        try {
            assertEquals(2, count(r));
            try {
                a.unlock();
            } catch (DlockException expected) {
                // its answer was lost: it may have released
            }
            assertEquals(1, sent.get(), "the release was sent again");
            assertEquals(1, count(r), "B's count was taken by A's release sent again");
            assertTrue(b.isHeld());
            assertTrue(TestEnv.liveOnServer(r));
        } finally {
            b.unlock();
        }
    }

    @Test
    @DisplayName("two locks of a session on one resource: an unlock() whose answer was lost is not sent again by the next lock()")
    void sessionLockNotSettledOverAnother() throws Exception {
        SessionTest.needSessions();
        String r = TestEnv.unique("lost-release-session");
        AtomicInteger armed = new AtomicInteger(), sent = new AtomicInteger();
        DlockSession s = DlockSession.open(answerLost(TestEnv.app(), armed, sent), Duration.ofMinutes(1));
        try {
            DlockLock a = s.lockBuilder(r).build();
            DlockLock b = s.lockBuilder(r).build();
            assertTrue(a.tryLock());
            assertTrue(b.tryLock());
            assertEquals(2, count(r));
            armed.set(1);
            try {
                a.unlock();
            } catch (DlockException expected) {
                // its answer was lost: it released A's count
            }
            assertEquals(1, count(r));
            assertTrue(a.tryLock()); // sent again here, it would take B's count
            assertEquals(1, sent.get(), "the lost release was sent again by the next lock()");
            assertEquals(2, count(r), "B's count was taken");
            assertEquals(b.fence(), a.fence(), "A re-entered B's holding");
            assertTrue(b.isHeld());
            a.unlock();
            b.unlock();
            assertEquals(0, count(r));
        } finally {
            s.close();
        }
    }
}
