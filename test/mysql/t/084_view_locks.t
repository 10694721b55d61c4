# 084_view_locks.t: reading dlock.locks locks nothing.
#
# The view is readable by every user.  It read dlock.leases in the reader's
# statement, and InnoDB reads with shared (next-key) locks in a statement
# that changes data (INSERT ... SELECT, UPDATE with a subquery, CREATE
# TABLE ... SELECT) under REPEATABLE READ, and in every statement of a
# SERIALIZABLE transaction: a user with no rights but SELECT on the view
# kept every holder's renew waiting (1205, the lease lost) and a try_lock
# of a new resource waiting, for as long as his transaction stayed open.
# Now the view reads through a function, whose reads are consistent
# (none in a SERIALIZABLE transaction: refused, 0A000), 1000 holdings a
# batch.
# Promises: P5
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/..";
use DlockMy;
use Test::More;

my $my = DlockMy->new;
$my->do_root('CREATE DATABASE app', 'CREATE TABLE app.t (f BIGINT) ENGINE = InnoDB',
             "GRANT ALL ON app.* TO bob\@'localhost'");
my $a = $my->connect('alice', undef, RaiseError => 0);
my $b = $my->connect('bob', undef, RaiseError => 0);
$_->do('SET SESSION innodb_lock_wait_timeout = 2') for $a, $b;

sub outcome {
    my ($dbh, $sql) = @_;
    my $sth = $dbh->prepare($sql);
    return 'error ' . $dbh->state unless $sth->execute;
    my $row = $sth->{NUM_OF_FIELDS} ? $sth->fetchrow_arrayref : undef;
    $sth->finish;
    return defined $row ? (defined $row->[0] ? $row->[0] : 'NULL') : 'ok';
}

my $f = outcome($a, "SELECT dlock.try_lock('view first', 'h1', 600)");
like($f, qr/^\d+$/, 'alice acquires');
my $row = $a->selectrow_hashref("SELECT * FROM dlock.locks WHERE fence = $f");
is(join('|', map { $row->{$_} // 'NULL' } qw(holder count lease owner expired)), 'h1|1|600.0000|alice|0', 'the view shows it');
like($row->{expires_at}, qr/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}$/, 'expires_at a DATETIME(6)');
for my $i (1 .. 30) { outcome($a, "SELECT dlock.try_lock('view/$i', 'h1', 600)"); }
outcome($a, "SELECT dlock.unlock('view/7', 'h1', NULL)");
is(outcome($b, 'SELECT COUNT(*) FROM dlock.locks'), 30, 'every live holding listed once, released ones not');

for my $sql ('INSERT INTO app.t SELECT fence FROM dlock.locks',
             'UPDATE app.t SET f = (SELECT MAX(fence) FROM dlock.locks)',
             'CREATE TABLE app.c AS SELECT * FROM dlock.locks') {
    $b->begin_work;
    is(outcome($b, $sql), 'ok', "bob: $sql");
    like(outcome($a, "SELECT dlock.renew('view/1', 'h1', 600, NULL)"), qr/^\d{4}-/, "meanwhile alice renews ($sql)");
    like(outcome($a, "SELECT dlock.try_lock('view/new-" . length($sql) . "', 'h1', 600)"), qr/^\d+$/,
         "and acquires a new resource at once");
    $b->rollback;
    $b->do('DROP TABLE IF EXISTS app.c');
}
$b->do('SET SESSION TRANSACTION ISOLATION LEVEL SERIALIZABLE');
$b->begin_work;
my $o = outcome($b, 'SELECT COUNT(*) FROM dlock.locks');
like($o, qr/^(error 0A000|\d+)$/, "bob reads the view in a SERIALIZABLE transaction ($o)");
like(outcome($a, "SELECT dlock.renew('view/1', 'h1', 600, NULL)"), qr/^\d{4}-/, 'meanwhile alice renews');
like(outcome($a, "SELECT dlock.try_lock('view/new-ser', 'h1', 600)"), qr/^\d+$/, 'and acquires a new resource');
$b->rollback;
$b->do('SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ');

# Many holdings: the view reads them in batches of 1000; all listed once.
my $root = $my->connect('root');
is(DlockMy::one($root, "SELECT COUNT(dlock.try_lock(CONCAT('many/', seq), 'hm', 600)) FROM mysql.seq_1_to_2500"), 2500,
   '2500 more holdings');
my $live = DlockMy::one($root, 'SELECT COUNT(*) FROM dlock.leases WHERE tail = 0 AND holder IS NOT NULL');
is(DlockMy::one($b, 'SELECT COUNT(*) FROM dlock.locks'), $live, "the view lists every one of the $live");
is(DlockMy::one($b, 'SELECT COUNT(DISTINCT resource) FROM dlock.locks'), $live, 'each once');
done_testing;
