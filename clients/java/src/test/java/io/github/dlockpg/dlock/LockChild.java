// LockChild: a second JVM for the cross-process test of LockContractTest:
// java ... LockChild RESOURCE TABLE N takes RESOURCE's DlockLock N times and
// enters the critical section of TABLE (CriticalSection) each time; exit
// status 0, or 1 when it saw another process inside with it.
package io.github.dlockpg.dlock;

import java.time.Duration;

public final class LockChild {
    public static void main(String[] args) throws Exception {
        DlockLock lock = new DlockLock(TestEnv.app(), args[0], Duration.ofSeconds(10));
        boolean alone = true;
        for (int i = 0; i < Integer.parseInt(args[2]); i++) {
            lock.lock();
            try {
                alone &= CriticalSection.enter(args[1]);
            } finally {
                lock.unlock();
            }
        }
        System.exit(alone ? 0 : 1);
    }
}
