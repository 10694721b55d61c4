// CriticalSection: a table row that counts who is inside and how often
// (LockContractTest, LockChild): enter() says whether it was alone.
package io.github.dlockpg.dlock;

import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;

final class CriticalSection {
    private CriticalSection() {}

    static void create(String table) throws SQLException {
        try (Connection c = TestEnv.app().getConnection(); var s = c.createStatement()) {
            s.execute("CREATE TABLE " + table + " (inside int NOT NULL, entries int NOT NULL)");
            s.execute("INSERT INTO " + table + " VALUES (0, 0)");
        }
    }

    /** Goes in, reads, waits a little, writes, goes out: true if nobody else was inside. */
    static boolean enter(String table) throws Exception {
        try (Connection c = TestEnv.app().getConnection(); var s = c.createStatement()) {
            int inside;
            int entries;
            try (ResultSet rs = s.executeQuery("UPDATE " + table + " SET inside = inside + 1 RETURNING inside, entries")) {
                rs.next();
                inside = rs.getInt(1);
                entries = rs.getInt(2);
            }
            Thread.sleep(2);
            s.executeUpdate("UPDATE " + table + " SET entries = " + (entries + 1) + ", inside = inside - 1");
            return inside == 1;
        }
    }

    static int entries(String table) throws SQLException {
        try (Connection c = TestEnv.app().getConnection(); var s = c.createStatement();
             ResultSet rs = s.executeQuery("SELECT entries FROM " + table)) {
            rs.next();
            return rs.getInt(1);
        }
    }
}
