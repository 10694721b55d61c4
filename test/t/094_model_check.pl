# 094_model_check.pl: the model checker (test/model/ModelCheck.pm and
# ModelKinds.pm, ModelSessions.pm) on synthetic histories, no server: for
# every rule about the kinds of lock (shared locks, semaphores' permits,
# several resources at once) and about sessions (a holding lives as long
# as its session; keepalive never revives; close_session ends every
# holding; other roles' keepalives fail), a history that breaks it is
# flagged, and its nearest history that keeps it (another holder text, a
# downgrade, an upgrade, an acknowledged release) is not flagged at all.
# 095_model.pl and the portable 070_model.t run the randomized workload
# these rules check.  Only Perl's core modules.
# Promises: none

use strict;
use warnings;

use Cwd qw(abs_path);
use File::Basename qw(dirname);
use Test::More;

use lib abs_path(dirname(__FILE__) . '/../model');
use ModelCheck;

my $T = 1_800_000_000_000_000;
my $seq = 0;

# op(t0 => ms, ...): a record as ModelDriver.pm logs it, at t0 ms after T,
# lasting 1 ms, acknowledged 1 ms later, committed in autocommit.
sub op
{
	my (%f) = @_;
	my $t0 = delete $f{t0};
	my $t1 = delete $f{t1} // $t0 + 1;
	my $tdone = delete $f{tdone} // $t1 + 1;
	$seq++;
	return { c => 0, role => 'postgres', su => 1, u => $seq, n => $seq, xact => 0,
		fate => 'commit', ufate => 'commit', t0 => $T + $t0 * 1000, t1 => $T + $t1 * 1000,
		tlo => $T + $t1 * 1000, tdone => $T + $tdone * 1000, %f };
}

# Acquisitions with a lease of 10 s (they surely live through each case).
sub ex { my ($t, $h, $f, %o) = @_; return op(t0 => $t, k => 'try_lock', r => 'r', h => $h, lease => 10_000, res => $f, %o) }
sub sh { my ($t, $h, $f, %o) = @_; return ex($t, $h, $f, sh => 1, %o) }
sub pm
{
	my ($t, $h, $f, $permits, %o) = @_;
	return op(t0 => $t, k => 'try_acquire', r => 'sem', h => $h, lease => 10_000, res => $f,
		max => 2, permits => $permits, %o);
}

# kinds(ops...): the kinds of violation the checker reports, sorted.
sub kinds
{
	my @ops = sort { $a->{c} <=> $b->{c} || $a->{n} <=> $b->{n} } @_;
	my ($v) = ModelCheck::check(\@ops);
	my %k = map { /^VIOLATION \[([^\]]+)\]/ ? ($1 => 1) : () } @$v;
	return join(',', sort keys %k) || 'none';
}

# Shared locks: any number of shared holders, or one exclusive.
is(kinds(sh(0, 'A', 10), sh(5, 'B', 11), sh(9, 'C', 12)), 'none', 'shared holders of three holder texts share');
is(kinds(sh(0, 'A', 10), ex(5, 'B', 11)), 'overlap', 'an exclusive holding beside a live shared one is flagged');
is(kinds(ex(0, 'A', 10), sh(5, 'B', 11)), 'overlap', 'a shared holding beside a live exclusive one is flagged');
is(kinds(ex(0, 'A', 10), sh(5, 'A', 11)), 'none', 'a downgrade (the exclusive holder also takes shared) is no overlap');
is(kinds(ex(0, 'A', 10), ex(5, 'A', 11)), 'overlap',
	'a second exclusive holding of one holder text beside the first is flagged (seed 89702493)');
is(kinds(sh(0, 'A', 10), ex(5, 'A', 11)), 'none', "the only shared holder's upgrade is no overlap");
is(kinds(sh(0, 'A', 10), sh(1, 'B', 11), ex(5, 'A', 12)), 'overlap',
	'an upgrade while another holder shares is flagged');
is(kinds(sh(0, 'A', 10, role => 'dlock_model_a', su => 0), ex(5, 'A', 11)), 'overlap',
	'the same holder text of another role is another holder');
# Every shared holding since the last exclusive one counts, not only the
# one just before (fence order).
is(kinds(ex(0, 'A', 10), op(t0 => 2, k => 'unlock', r => 'r', h => 'A', res => 0),
		sh(5, 'B', 11), sh(6, 'C', 12), op(t0 => 8, k => 'unlock', r => 'r', h => 'C', res => 0),
		ex(10, 'D', 13)), 'overlap', 'an exclusive holding beside an older shared one (not the last) is flagged');
is(kinds(ex(0, 'A', 10), op(t0 => 2, k => 'unlock', r => 'r', h => 'A', res => 0),
		sh(5, 'B', 11), sh(6, 'C', 12), op(t0 => 7, k => 'unlock', r => 'r', h => 'B', res => 0),
		op(t0 => 8, k => 'unlock', r => 'r', h => 'C', res => 0), ex(10, 'D', 13)), 'none',
	'... and not once every shared holder released');
is(kinds(sh(0, 'A', 10), op(t0 => 5, k => 'try_xact_lock', r => 'r', res => 11, xact => 1)), 'overlap',
	'a transaction-scoped lock beside a live shared holding is flagged');
# A renew without a fence meets whichever holding of the holder text is
# live: after an upgrade it may have been the shared one (seed 301343419).
my $rn = sub { my ($t, $h, $until) = @_; op(t0 => $t, k => 'renew', r => 'r', h => $h, res => $T + $until * 1000) };
is(kinds(sh(0, 'A', 10), $rn->(2, 'A', 1000), ex(3, 'A', 11, lease => 50), sh(100, 'B', 12)), 'none',
	"a fenceless renew before an upgrade need not have extended the exclusive holding");
is(kinds(ex(0, 'A', 10, lease => 50), $rn->(2, 'A', 1000), sh(100, 'B', 11)), 'overlap',
	'... but it extends the only holding of its holder text');
# Fences: each new holder's is greater than every one before, shared or not.
is(kinds(sh(0, 'A', 11), sh(5, 'B', 10)), 'fence-order', 'a newer shared holding with a smaller fence is flagged');
is(kinds(sh(0, 'A', 10), sh(5, 'B', 10)), 'fence-unique', 'two shared holders with one fence are flagged');
is(kinds(sh(0, 'A', 10), sh(3, 'A', 10), ex(5, 'A', 11)), 'none', 'a shared re-entry keeps its fence');
# check/assert_fence accept any current holder's fence and refuse others.
my $af = sub { my ($t, $f) = @_; op(t0 => $t, k => 'assert_fence', r => 'r', f => $f, res => 1) };
is(kinds(sh(0, 'A', 10), sh(5, 'B', 11), $af->(9, 10)), 'none',
	"assert_fence of a shared holder's fence beside a newer shared holder");
is(kinds(ex(0, 'A', 10), sh(5, 'A', 11), $af->(9, 10)), 'none', 'assert_fence of the exclusive fence after a downgrade');
is(kinds(sh(0, 'A', 10), ex(5, 'A', 11), $af->(9, 10)), 'none', 'assert_fence of the shared fence after an upgrade');
is(kinds(sh(0, 'A', 10), op(t0 => 2, k => 'break_lock', r => 'r', res => 1), ex(5, 'B', 11), $af->(9, 10)),
	'assert-fence', 'assert_fence of a shared fence after a newer exclusive holder is flagged');
is(kinds(ex(0, 'A', 10), op(t0 => 2, k => 'break_lock', r => 'r', res => 1), sh(5, 'B', 11), $af->(9, 10)),
	'assert-fence', 'assert_fence of an exclusive fence after a newer shared holder is flagged');
# unlock and renew under a fence act on that holding only: after it ended
# (released, a newer holding, its lease) they must not succeed.
my $uf = sub { my ($t, $h, $f, $res) = @_; op(t0 => $t, k => 'unlock', r => 'r', h => $h, f => $f, res => $res) };
my $rf = sub { my ($t, $h, $f, $res) = @_; op(t0 => $t, k => 'renew', r => 'r', h => $h, f => $f, res => $res) };
is(kinds(ex(0, 'A', 10), $uf->(2, 'A', 10, 0), ex(5, 'A', 11), $uf->(9, 'A', 10, 0)), 'stale-fence',
	"an unlock under the holder's released fence that released its new holding is flagged");
is(kinds(ex(0, 'A', 10), $uf->(2, 'A', 10, 0), ex(5, 'A', 11), $uf->(9, 'A', 10, undef), $uf->(10, 'A', 11, 0)),
	'none', '... and not when it returns NULL and the new fence releases');
is(kinds(ex(0, 'A', 10), $uf->(2, 'A', 10, 0), ex(5, 'A', 11), $rf->(9, 'A', 10, $T + 20_000_000)),
	'stale-fence', 'a renew under a released fence that extended the new holding is flagged');
is(kinds(ex(0, 'A', 10), op(t0 => 2, k => 'break_lock', r => 'r', res => 1), ex(5, 'B', 11),
		$uf->(9, 'A', 10, 0)), 'stale-fence', 'an unlock under a fence broken and taken by another holder is flagged');
is(kinds(sh(0, 'A', 10), sh(5, 'B', 11), $uf->(9, 'A', 10, 0)), 'none',
	'an unlock under a shared fence beside a newer shared holder');
my $ufl = sub { my ($t, $h, $res) = @_; op(t0 => $t, k => 'unlock', r => 'r', h => $h, res => $res) };
is(kinds(sh(0, 'A', 10), $ufl->(2, 'A', 0), sh(5, 'A', 12), $uf->(9, 'A', 10, 0)), 'stale-fence',
	'an unlock under a shared fence after its holder released it (no fence) and took it again is flagged');
is(kinds(ex(0, 'A', 10), $ufl->(2, 'A', 0), ex(5, 'A', 12), $rf->(9, 'A', 10, $T + 20_000_000)), 'stale-fence',
	'... a renew under an exclusive one too');
is(kinds(ex(0, 'A', 10), ex(3, 'A', 10), $uf->(9, 'A', 10, 1)), 'none', '... not after a re-entry, which keeps the fence');
is(kinds(ex(0, 'A', 10), sh(3, 'A', 12), $uf->(9, 'A', 10, 0)), 'none', '... nor after a downgrade (another mode)');
is(kinds(ex(0, 'A', 10, lease => 50), $uf->(100, 'A', 10, 0)), 'stale-fence',
	'an unlock under a fence after its lease ended is flagged');
is(kinds(ex(0, 'A', 10, lease => 50), $rf->(100, 'A', 10, $T + 1_000_000)), 'revival',
	'... a renew there is a revival (one verdict, not two)');
# Counts per holding: unlock without a fence releases the exclusive one first.
my $h = 'postgres/c0/h0';
my $ul = sub { my ($t, $res) = @_; op(t0 => $t, k => 'unlock', r => 'r', h => $h, res => $res) };
is(kinds(ex(0, $h, 10), sh(1, $h, 11), sh(2, $h, 11), $ul->(3, 0), $ul->(4, 1), $ul->(5, 0)), 'none',
	'unlock: the exclusive holding first, then the shared one, each with its count');
is(kinds(ex(0, $h, 10), sh(1, $h, 11), sh(2, $h, 11), $ul->(3, 2)), 'count',
	'unlock returning a count that neither holding had is flagged');
# (seed 1108997909: the exclusive holding had expired, unlock met the
# shared one, whose count is then accepted: the model has no clock)
is(kinds(ex(0, $h, 10), sh(1, $h, 11), sh(2, $h, 11), $ul->(3, 1), $ul->(4, 0)), 'none',
	'unlock returning the shared count (the exclusive one may have expired)');
is(kinds(ex(0, $h, 10), sh(1, $h, 11), $ul->(3, 0), $ul->(4, 0), $ul->(5, undef), ex(6, $h, 12),
		$ul->(7, 1)), 'count', '... and once unlock says none is held, counts are known again');

# A renew's NULL is no proof that the holding ended (MariaDB's renew does
# not wait for a break_lock under way, which may roll back; seed
# 262211867): a re-entry after it may find the count it had.
my $rn_null = sub { my ($t, $f, $res) = @_; op(t0 => $t, k => 'renew', r => 'r', h => $h, f => $f, res => $res) };
is(kinds(ex(0, $h, 10), $rn_null->(2, 10, undef), ex(4, $h, 10), $ul->(6, 1), $ul->(7, 0)), 'none',
	"a re-entry after a renew's NULL: the count is unknown, then known again");
is(kinds(ex(0, $h, 10), $rn_null->(2, 10, undef), ex(4, $h, 10), $ul->(6, 1), $ul->(7, 0), $ul->(8, undef),
		ex(9, $h, 12), $ul->(10, 1)), 'count', '... and once unlock says none is held, counts are checked again');

# Semaphores: never more than max_permits permits held at once.
is(kinds(pm(0, 'A', 20, 1), pm(5, 'B', 21, 1)), 'none', 'two holdings of one permit each, max 2');
is(kinds(pm(0, 'A', 20, 1), pm(5, 'B', 21, 2)), 'permits', 'three permits held at once, max 2, are flagged');
is(kinds(pm(0, 'A', 20, 1), pm(3, 'A', 20, 1), pm(6, 'B', 21, 1)), 'permits',
	'acquiring again adds permits: three at once is flagged');
is(kinds(pm(0, 'A', 20, 2), op(t0 => 2, k => 'unlock', r => 'sem', h => 'A', res => 0), pm(5, 'B', 21, 2)),
	'none', 'permits given back by unlock are free');
is(kinds(pm(0, 'A', 20, 1), pm(3, 'A', 20, 1), op(t0 => 4, k => 'unlock', r => 'sem', h => 'A', res => 0),
		pm(6, 'A', 20, 1)), 'permits', 'unlock returns all: the holding taken again with its old fence is flagged');
is(kinds(pm(0, 'A', 21, 1), pm(5, 'B', 20, 1)), 'fence-order', "semaphores' fences go forward too");
# (seed 1855440093, 17: a renew without a fence of the holder text's later
# holding is no sign its earlier, expired one still lived)
my $srn = sub { my ($t, $until) = @_; op(t0 => $t, k => 'renew', r => 'sem', h => 'A', res => $T + $until * 1000) };
is(kinds(pm(0, 'A', 20, 1, lease => 100), pm(300, 'A', 21, 1), $srn->(350, 5000), pm(400, 'B', 22, 2, max => 3)),
	'none', "permits: a holder text's expired holding is not counted beside its next one");
is(kinds(pm(0, 'A', 20, 1), pm(5, 'B', 20, 1)), 'fence-unique', 'each holding has its own fence');

# Several resources at once: all or nothing, the fences in the order given.
my $all = sub {
	my ($t, $rs, $res, %o) = @_;
	op(t0 => $t, k => 'try_lock_all', rs => $rs, h => 'M', lease => 10_000, res => $res, %o);
};
is(kinds($all->(0, [qw(r q)], [ 10, 11 ]), ex(5, 'M', 10), ex(6, 'M', 11, r => 'q')), 'none',
	'lock_all: each resource its own holding, re-entered with its fence');
is(kinds($all->(0, [qw(r q)], [ 10, undef ])), 'all-or-nothing', 'lock_all: a subset acquired is flagged');
is(kinds($all->(0, [qw(r q)], [10])), 'all-or-nothing', 'lock_all: fewer fences than resources are flagged');
is(kinds($all->(0, [qw(r q)], [ 10, 10 ])), 'all-or-nothing', 'lock_all: one fence for two resources is flagged');
is(kinds($all->(0, [qw(r q)], [ 10, 11 ]), ex(5, 'M', 11)), 'fence-unique',
	"lock_all: fences not in the order given (a re-entry gets the other resource's) are flagged");
is(kinds(ex(0, 'A', 10), $all->(5, [qw(q r)], [ 11, 12 ])), 'overlap',
	'lock_all: a resource taken while another holder surely held it is flagged');
is(kinds(ex(0, 'M', 10), $all->(5, [qw(q r)], undef, after => [ [ 'r', 10 ] ])), 'none',
	'lock_all NULL: a holding the caller had before stays');
is(kinds(ex(0, 'M', 10), $all->(5, [qw(q r)], undef, after => [ [ 'q', 12 ], [ 'r', 10 ] ])),
	'all-or-nothing', 'lock_all NULL: a resource left held under a new fence is flagged');

# Sessions (ModelSessions.pm): a holding in a session lives as long as its
# session; keepalive never revives; close_session ends every holding.
my $S = 7000;    # the session's id
my $sh_h = 'sess/postgres/c0/s1';
my $open = sub { my ($t, $ttl, %o) = @_; op(t0 => $t, k => 'open_session', h => $sh_h, ttl => $ttl, res => $S, sess => $S, %o) };
my $ka = sub { my ($t, $until, %o) = @_; op(t0 => $t, k => 'keepalive', sess => $S, res => defined $until ? $T + $until * 1000 : undef, %o) };
my $close = sub { my ($t, $n, %o) = @_; op(t0 => $t, k => 'close_session', sess => $S, res => $n, %o) };
my $sx = sub { my ($t, $f, %o) = @_; op(t0 => $t, k => 'try_lock', r => 'r', h => $sh_h, res => $f, sess => $S, %o) };
my $schk = sub { my ($t, $f, %o) = @_; op(t0 => $t, k => 'check', r => 'r', f => $f, res => 1, sess => $S, %o) };
is(kinds($open->(0, 100), $sx->(10, 10), $ka->(50, 150), $ka->(120, 220), $schk->(200, 10)), 'none',
	'sessions: keepalives within the ttl keep the session and its holding');
is(kinds($open->(0, 100), $sx->(10, 10), $ka->(500, 600)), 'session-revival',
	'sessions: a keepalive after every extension ran out (it revives) is flagged');
is(kinds($open->(0, 10_000), $sx->(10, 10), $ka->(20, undef), $ka->(40, 10_040)), 'session-revival',
	'sessions: a keepalive returning an expiry after one returned NULL is flagged');
is(kinds($open->(0, 10_000), $sx->(10, 10), $close->(20, 1), $ka->(40, 10_040)), 'session-revival',
	'sessions: a keepalive after close_session is flagged');
is(kinds($open->(0, 10_000), $sx->(10, 10), $close->(20, 1, fate => 'rollback'), $ka->(40, 10_040)), 'none',
	'... but not after a close_session that rolled back');
is(kinds($open->(0, 10_000), $close->(20, 0), $sx->(40, 10)), 'session-revival',
	'sessions: an acquisition in a closed session is flagged');
is(kinds($open->(0, 10_000), $sx->(10, 10), $schk->(15, 10), $close->(20, 1)), 'none',
	'sessions: check of a holding before its session closed');
is(kinds($open->(0, 10_000), $sx->(10, 10), $close->(20, 1), $schk->(40, 10)), 'session-end',
	'sessions: check of a holding after its session closed is flagged');
is(kinds($open->(0, 100), $sx->(10, 10), $schk->(500, 10)), 'session-end',
	"sessions: check of a holding after its session's ttl passed is flagged");
is(kinds($open->(0, 100), $sx->(10, 10), $ka->(50, 150),
		op(t0 => 400, k => 'assert_fence', r => 'r', f => 10, res => 1, sess => $S)), 'assert-fence,session-end',
	"sessions: assert_fence of a holding after its session's end is flagged");
# Two exclusive holders: the session's expiry counts.
is(kinds($open->(0, 100), $sx->(10, 10), ex(200, 'B', 11)), 'none',
	'sessions: a resource taken after its holding\'s session lapsed');
is(kinds($open->(0, 100), $sx->(10, 10), $ka->(50, 5000), ex(200, 'B', 11)), 'overlap',
	'sessions: a resource taken while a keepalive kept the holding\'s session is flagged');
is(kinds($open->(0, 100), $sx->(10, 10), $ka->(50, 5000), $close->(60, 1), ex(200, 'B', 11)), 'none',
	'... but not after close_session ended it');
is(kinds($open->(0, 100), $sx->(10, 10), $ka->(50, 5000, fate => 'rollback'), ex(200, 'B', 11)), 'none',
	'... nor when that keepalive rolled back');
is(kinds($open->(0, 100), $sx->(10, 10),
		op(t0 => 50, k => 'renew', r => 'r', h => $sh_h, f => 10, res => $T + 5_000_000, sess => $S),
		ex(200, 'B', 11)), 'overlap', "sessions: a renew of a session's holding keeps the session");
is(kinds($open->(0, 10_000), $sx->(10, 10), $sx->(20, 10)), 'none', 'sessions: a re-entry keeps its fence');
is(kinds($open->(0, 10_000), $sx->(10, 11), ex(20, 'B', 12), $close->(30, 1), ex(40, 'C', 10)), 'fence-order,overlap',
	"sessions: fences go forward after a session's holding too");
is(kinds($open->(0, 10_000), ex(5, 'B', $S)), 'fence-unique', "sessions: a holding given a session's id as its fence is flagged");
is(kinds($open->(0, 10_000), $open->(5, 10_000, h => 'sess/other')), 'fence-unique', 'sessions: one id for two sessions is flagged');
is(kinds($open->(0, 10_000), op(t0 => 5, k => 'keepalive', sess => $S, res => $T + 9_000_000,
			role => 'dlock_model_b', su => 0, steal => 1)), 'role',
	"sessions: another role's keepalive that succeeds is flagged");
is(kinds($open->(0, 10_000), op(t0 => 5, k => 'close_session', sess => $S, err => '42501',
			role => 'dlock_model_b', su => 0, steal => 1)), 'none',
	"... and its 42501 is expected");

# A renew in a transaction whose COMMIT got no answer (fate maybe) may not
# have happened: it never makes a lease's sure end later (seed 635791428:
# an xact lock after the lease's end without it was flagged).
{
	my $short = sub { op(t0 => 0, k => 'try_lock', r => 'r', h => 'A', lease => 100, res => 10) };
	my $renew = sub { op(t0 => 50, k => 'renew', r => 'r', h => 'A', res => $T + 1050 * 1000, xact => 1, @_) };
	is(kinds($short->(), $renew->(fate => 'maybe', ufate => 'maybe'), ex(200, 'B', 11)), 'none',
		'a maybe renew does not extend the sure life: a later holder is no overlap');
	is(kinds($short->(), $renew->(), ex(200, 'B', 11)), 'overlap',
		'... and the same renew committed does: flagged');
	is(kinds($short->(), $renew->(fate => 'maybe', ufate => 'maybe'),
			op(t0 => 60, k => 'renew', r => 'r', h => 'A', res => $T + 1060 * 1000), ex(200, 'B', 11)),
		'overlap', '... as does a committed renew after it');
}

done_testing();
