// LossListener: told once when a holding's lease is lost.
package io.github.dlockpg.dlock;

/**
 * Called once per lost holding, before the lease's end, on a thread of
 * the client's own (one per lost holding while its listeners run): a slow
 * listener delays no other holding's loss, but should still hand long
 * work off.
 */
@FunctionalInterface
public interface LossListener {
    void lost(LockLostException why);
}
