// DlockException: what dlock's Java client throws where a Lock method
// cannot throw SQLException: the SQLSTATE of the cause, or dlock's own
// (22023 for a bad argument refused before anything is sent).
package io.github.dlockpg.dlock;

import java.sql.SQLException;

/** An error of dlock's client; {@link #getSQLState()} gives the SQLSTATE where one applies. */
public class DlockException extends RuntimeException {
    private static final long serialVersionUID = 1L;
    private final String sqlState;

    public DlockException(String message, String sqlState, Throwable cause) {
        super(message, cause);
        this.sqlState = sqlState != null ? sqlState
            : cause instanceof SQLException ? ((SQLException) cause).getSQLState() : null;
    }

    /** The SQLSTATE: the server's (from the SQLException that caused it), or dlock's own; null if none. */
    public String getSQLState() {
        return sqlState;
    }

    static DlockException invalid(String message) {
        return new DlockException("dlock: " + message, "22023", null);
    }

    static DlockException of(String what, SQLException e) {
        return new DlockException("dlock: " + what + ": " + e.getMessage(), null, e);
    }
}
