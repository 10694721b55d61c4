// LockContractTest: DlockLock against the Javadoc of
// java.util.concurrent.locks.Lock: mutual exclusion across threads and
// across two JVM processes (no lost update of a counter), tryLock() and
// tryLock(time, unit) timing out, lockInterruptibly() interrupted, unlock()
// by a thread that does not own it (IllegalMonitorStateException), re-entry
// by the owner, newCondition() unsupported.
// Promises: P2 P16
package io.github.dlockpg.dlock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.Lock;
import org.junit.jupiter.api.DisplayName;
import org.junit.jupiter.api.Test;

class LockContractTest {
    private static final Duration LEASE = Duration.ofSeconds(10);

    @Test
    @DisplayName("mutual exclusion across threads: one Lock object shared by four threads, no lost update")
    void threadsOneObject() throws Exception {
        String table = "java_cs_" + ProcessHandle.current().pid() + "_t1";
        CriticalSection.create(table);
        DlockLock lock = new DlockLock(TestEnv.app(), TestEnv.unique("threads"), LEASE);
        AtomicBoolean alone = new AtomicBoolean(true);
        List<Thread> ts = new ArrayList<>();
        for (int t = 0; t < 4; t++) {
            ts.add(new Thread(() -> {
                for (int i = 0; i < 10; i++) {
                    lock.lock();
                    try {
                        if (!CriticalSection.enter(table)) alone.set(false);
                    } catch (Exception e) {
                        alone.set(false);
                    } finally {
                        lock.unlock();
                    }
                }
            }));
        }
        ts.forEach(Thread::start);
        for (Thread t : ts) t.join();
        assertTrue(alone.get(), "nobody else inside");
        assertEquals(40, CriticalSection.entries(table));
    }

    @Test
    @DisplayName("mutual exclusion across threads with a Lock object each (holders differ), and across two JVM processes")
    void processes() throws Exception {
        String table = "java_cs_" + ProcessHandle.current().pid() + "_p";
        CriticalSection.create(table);
        String resource = TestEnv.unique("processes");
        String java = ProcessHandle.current().info().command().orElse("java");
        File log = File.createTempFile("dlock-lockchild-", ".log");
        log.deleteOnExit();
        Process child = new ProcessBuilder(java, "-cp", System.getProperty("java.class.path"),
            LockChild.class.getName(), resource, table, "30").redirectErrorStream(true)
            .redirectOutput(log).start();
        AtomicBoolean alone = new AtomicBoolean(true);
        List<Thread> ts = new ArrayList<>();
        for (int t = 0; t < 2; t++) {
            DlockLock lock = new DlockLock(TestEnv.app(), resource, LEASE);
            ts.add(new Thread(() -> {
                for (int i = 0; i < 15; i++) {
                    lock.lock();
                    try {
                        if (!CriticalSection.enter(table)) alone.set(false);
                    } catch (Exception e) {
                        alone.set(false);
                    } finally {
                        lock.unlock();
                    }
                }
            }));
        }
        ts.forEach(Thread::start);
        for (Thread t : ts) t.join();
        assertTrue(child.waitFor(60, TimeUnit.SECONDS), "the other JVM finished");
        assertEquals(0, child.exitValue(), () -> "the other JVM was alone inside; its output: " + read(log));
        assertTrue(alone.get(), "this JVM's threads were alone inside");
        assertEquals(60, CriticalSection.entries(table));
    }

    private static String read(File f) {
        try {
            return java.nio.file.Files.readString(f.toPath());
        } catch (java.io.IOException e) {
            return e.toString();
        }
    }

    @Test
    @DisplayName("tryLock() gives false at once while another holds it; tryLock(time) false after the time; true once free")
    void tryLockTimeouts() throws Exception {
        String r = TestEnv.unique("try");
        DlockLock a = new DlockLock(TestEnv.app(), r, LEASE);
        DlockLock b = new DlockLock(TestEnv.app(), r, LEASE);
        a.lock();
        try {
            assertFalse(b.tryLock());
            long t0 = System.nanoTime();
            assertFalse(b.tryLock(300, TimeUnit.MILLISECONDS));
            assertTrue(System.nanoTime() - t0 >= TimeUnit.MILLISECONDS.toNanos(300), "waited its time");
            // another thread of A's JVM, on A's object: the local owner check
            assertFalse(CompletableFuture.supplyAsync(a::tryLock).get());
        } finally {
            a.unlock();
        }
        assertTrue(b.tryLock(5, TimeUnit.SECONDS));
        assertNotEquals(0, b.fence());
        b.unlock();
    }

    @Test
    @DisplayName("tryLock(time) acquires when the holder unlocks during the wait")
    void tryLockWaits() throws Exception {
        String r = TestEnv.unique("trywait");
        DlockLock a = new DlockLock(TestEnv.app(), r, LEASE);
        DlockLock b = new DlockLock(TestEnv.app(), r, LEASE);
        CountDownLatch held = new CountDownLatch(1);
        Thread t = new Thread(() -> {
            a.lock();
            held.countDown();
            try {
                Thread.sleep(500);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            a.unlock();
        });
        t.start();
        held.await();
        assertTrue(b.tryLock(20, TimeUnit.SECONDS));
        assertTrue(b.fence() > a.fence(), "a later holder, a greater fence");
        b.unlock();
        t.join();
    }

    @Test
    @DisplayName("lockInterruptibly(): interrupted while waiting, throws InterruptedException and holds nothing")
    void lockInterruptibly() throws Exception {
        String r = TestEnv.unique("interrupt");
        DlockLock a = new DlockLock(TestEnv.app(), r, LEASE);
        DlockLock b = new DlockLock(TestEnv.app(), r, LEASE);
        a.lock();
        AtomicReference<Throwable> got = new AtomicReference<>();
        CountDownLatch started = new CountDownLatch(1);
        Thread t = new Thread(() -> {
            started.countDown();
            try {
                b.lockInterruptibly();
                got.set(new AssertionError("acquired"));
            } catch (Throwable e) {
                got.set(e);
            }
        });
        t.start();
        started.await();
        Thread.sleep(300);
        t.interrupt();
        t.join(20_000);
        assertFalse(t.isAlive(), "the waiter returned");
        assertTrue(got.get() instanceof InterruptedException, String.valueOf(got.get()));
        assertFalse(b.isHeldByCurrentThread());
        a.unlock();
        // already interrupted: throws at once
        Thread.currentThread().interrupt();
        assertThrows(InterruptedException.class, b::lockInterruptibly);
        assertTrue(b.tryLock());
        b.unlock();
    }

    @Test
    @DisplayName("unlock() by a thread that does not own it: IllegalMonitorStateException, the lock stays held")
    void unlockByNonOwner() throws Exception {
        String r = TestEnv.unique("owner");
        DlockLock a = new DlockLock(TestEnv.app(), r, LEASE);
        assertThrows(IllegalMonitorStateException.class, a::unlock, "never locked");
        a.lock();
        Throwable e = CompletableFuture.runAsync(a::unlock).handle((v, x) -> x).get();
        assertTrue(e != null && e.getCause() instanceof IllegalMonitorStateException, String.valueOf(e));
        assertTrue(a.isHeld());
        assertTrue(a.check(), "still held on the server");
        a.unlock();
        assertFalse(a.isHeld());
    }

    @Test
    @DisplayName("re-entry by the owner: counts locally, one fence, released by the last unlock(); newCondition() unsupported")
    void reentry() throws Exception {
        String r = TestEnv.unique("reenter");
        DlockLock a = new DlockLock(TestEnv.app(), r, LEASE);
        Lock other = new DlockLock(TestEnv.app(), r, LEASE);
        a.lock();
        long fence = a.fence();
        assertTrue(a.tryLock());
        a.lock();
        assertEquals(3, a.getHoldCount());
        assertEquals(fence, a.fence());
        a.unlock();
        a.unlock();
        assertFalse(other.tryLock(), "still held after two of three unlocks");
        a.unlock();
        assertTrue(other.tryLock(), "free after the last");
        other.unlock();
        assertThrows(UnsupportedOperationException.class, a::newCondition);
    }
}
