// LossListener: told once when a holding's lease is lost.
package io.github.dlockpg.dlock;

/**
 * Called once per lost holding, before the lease's end, on the client's
 * timer or renewal thread: it must return quickly (hand the work off).
 */
@FunctionalInterface
public interface LossListener {
    void lost(LockLostException why);
}
