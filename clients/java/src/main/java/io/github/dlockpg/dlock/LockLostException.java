// LockLostException: the lease of a holding was lost (broken by an
// administrator, expired and taken, or renewals failed until just before
// the lease's end).  Given to loss listeners; thrown by unlock().
package io.github.dlockpg.dlock;

/** The lease was lost; {@link #getCause()} is the last renewal error, if any. */
public class LockLostException extends DlockException {
    private static final long serialVersionUID = 1L;
    private final String resource;
    private final long fence;

    LockLostException(String resource, long fence, String reason, Throwable cause) {
        super("dlock: lost " + resource + " (fence " + fence + "): " + reason, null, cause);
        this.resource = resource;
        this.fence = fence;
    }

    /** The resource (for several at once: their names joined by ", "). */
    public String resource() {
        return resource;
    }

    /** The fence of the holding that was lost (several: the first). */
    public long fence() {
        return fence;
    }
}
