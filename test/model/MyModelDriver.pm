# MyModelDriver.pm: the clients of dlock's randomized, model-checked
# workload for the MySQL/MariaDB edition (mysql/dlock.sql), the twin of
# ModelDriver.pm (PostgreSQL): its logs are checked by the same checker,
# ModelCheck.pm.
#
# Each client is a forked process with its own DBD::MariaDB connection as
# one MariaDB user (admin, granted break_lock, alice and bob, who are not;
# no user stands above the owner check there), playing random operations
# (try_lock, CALL lock, unlock, renew, unlock_all, CALL reap, break_lock,
# check_fence, assert_fence, CALL xact_lock, try_xact_lock, and "steals":
# unlock/renew of another user's holding read from dlock.locks) on a few
# resources with short leases (and now and then one new to the table), in autocommit and in transactions
# (REPEATABLE READ or READ COMMITTED, with savepoints, ROLLBACK TO, and
# rollbacks).  One client is the prober (ModelDriver.pm's): alone on its
# own resource, it checks that its expired lease is free at once while
# other clients keep transactions open in which CALL reap() was refused
# (it runs in autocommit only).
#
# Records are those of ModelDriver.pm (see there and ModelCheck.pm): the
# server clock (SYSDATE(6), the clock at the call) read in the same
# statement right before and after a function call (t0, t1); a procedure
# (CALL lock, reap, xact_lock) cannot share a statement, so its t0 and t1
# are read by the statements right before and after it, in the same
# transaction.  Besides: tid, the connection id, and nowait, set on calls
# the contract says never wait for another transaction (try_lock,
# try_xact_lock, check_fence, renew; lock, xact_lock and reap, which poll
# or skip instead; renew, unlock and unlock_all may wait only for a
# transaction that pinned or changed that holding, see mark_waits).  The waits monitor (a root connection polling
# information_schema.INNODB_LOCK_WAITS) logs which connection waited when,
# in which statement, for which connection; mark_waits() sets waited on
# the operations that were running then, and on those that ended in a lock
# wait timeout (1205) or a deadlock (1213, which needs a wait), so that
# ModelCheck's no-wait check flags every nowait call that waited.
#
# Random choices come from a per-client seed derived from the run's seed.

package MyModelDriver;

use strict;
use warnings;

use DBI;
use JSON::PP;
use List::Util ();
use POSIX ();
use Time::HiRes qw(time usleep);
use Time::Local ();

# The server clock in microseconds since the epoch (sessions run in UTC).
my $T = q{CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS SIGNED)};

my @LEASES_MS = (50, 100, 200, 500, 1000);
my $JSON = JSON::PP->new->canonical;
my %NOWAIT = map { $_ => 1 } qw(try_lock try_xact_lock check renew lock xact_lock reap);

# connect_as: a connection through the socket as user, autocommit, errors
# reported (not raised), the session in UTC, waits for a row lock ended
# after 2 s (lock wait timeout, 1205).
sub connect_as
{
	my ($sock, $user, $pass) = @_;
	my $dbh = DBI->connect("DBI:MariaDB:mariadb_socket=$sock", $user, $pass,
		{ AutoCommit => 1, RaiseError => 0, PrintError => 0, PrintWarn => 0 })
	  or die "cannot connect as $user: $DBI::errstr\n";
	$dbh->do(q{SET time_zone = '+00:00'}) or die $dbh->errstr;
	$dbh->do(q{SET SESSION innodb_lock_wait_timeout = 2}) or die $dbh->errstr;
	$dbh->do(q{SET SESSION max_statement_time = 20}) or die $dbh->errstr;
	return $dbh;
}

sub now_us
{
	my ($dbh) = @_;
	my ($t) = $dbh->selectrow_array("SELECT $T");
	die "cannot read the server clock: " . ($dbh->errstr // '') . "\n" unless defined $t;
	return $t;
}

# Client object: sock, user, pass, id, seed, seconds, resources, tag,
# probe (resource, for the prober), logfile, start (the run's, the same
# for every client: names the new resources).
sub new
{
	my ($class, %a) = @_;
	my $self = bless {%a}, $class;
	my $tag = defined $a{tag} ? "\@$a{tag}" : '';
	$self->{role} = $a{user};
	$self->{holders} = [ map { "$a{user}/c$a{id}/h$_$tag" } 0 .. 1 ];
	$self->{shared} = [ map { "shared/h$_$tag" } 0 .. 1 ];
	$self->{fence} = {};    # "r\0h" => last fence this client saw returned
	$self->{old} = {};      # "r\0h" => the one it saw before that
	$self->{seq} = 0;
	$self->{unit} = 0;
	return $self;
}

sub rnd { my ($n) = @_; return int(rand($n)); }
sub pick { my @a = @_; return $a[ rnd(scalar @a) ]; }

sub record
{
	my ($self, $op, %f) = @_;
	return { c => $self->{id}, role => $self->{role}, su => 0, tid => $self->{tid},
		u => $self->{unit}, n => $self->{seq}++, k => $op, ($NOWAIT{$op} ? (nowait => 1) : ()), %f };
}

# set_err: the error of a failed call, bracketed by the client's last
# clock read before it (tlast) and one after (t0e, t1e: mark_waits looks
# there for its waits).
sub set_err
{
	my ($self, $rec, $h) = @_;
	$rec->{err} = $h->state || 'XXXXX';
	$rec->{errno} = $h->err;
	$rec->{msg} = $h->errstr;
	$rec->{t0e} = $self->{tlast};
	my ($t) = $self->{dbh}->selectrow_array("SELECT $T");
	$rec->{t1e} = $t;
}

# call: a function call in one statement "SELECT t0, call, t1".
sub call
{
	my ($self, $op, $sql, $binds, %f) = @_;
	my $dbh = $self->{dbh};
	my $rec = $self->record($op, %f);
	my $row = $dbh->selectrow_arrayref("SELECT $T, $sql, $T", undef, @$binds);
	if ($row) { ($rec->{t0}, $rec->{res}, $rec->{t1}) = @$row; $self->{tlast} = $rec->{t1} }
	else { $self->set_err($rec, $dbh) }
	return $rec;
}

# call_proc: a CALL, its first column of its one row the result; the clock
# read by the statements right before and after.
sub call_proc
{
	my ($self, $op, $sql, $binds, %f) = @_;
	my $dbh = $self->{dbh};
	my $rec = $self->record($op, %f);
	my ($t0) = $dbh->selectrow_array("SELECT $T");
	if (!defined $t0) { $self->set_err($rec, $dbh); return $rec }
	$rec->{t0} = $self->{tlast} = $t0;
	my $sth = $dbh->prepare($sql);
	if ($sth && $sth->execute(@$binds))
	{
		my $row = $sth->fetchrow_arrayref;
		$rec->{res} = $row ? $row->[0] : undef;
		$sth->finish;
		1 while $sth->more_results;
	}
	else
	{
		$self->set_err($rec, $sth // $dbh);
		delete $rec->{t0};
		return $rec;
	}
	my ($t1) = $dbh->selectrow_array("SELECT $T");
	if (!defined $t1) { $self->set_err($rec, $dbh); delete $rec->{t0}; return $rec }
	$rec->{t1} = $self->{tlast} = $t1;
	return $rec;
}

sub secs { my ($ms) = @_; return $ms / 1000; }

sub read_failed
{
	my ($self) = @_;
	my $dbh = $self->{dbh};
	return undef unless $dbh->err;
	my $rec = $self->record('read');
	$self->set_err($rec, $dbh);
	return $rec;
}

sub random_op
{
	my ($self, $in_xact) = @_;
	# One time in eight a resource new to the table, the same for every
	# client during a quarter of a second: acquisitions of a new row race.
	my $r = rnd(8) ? pick(@{ $self->{resources} })
	  : "$self->{tag}/new" . int((time - $self->{start}) * 4);
	my $h = rnd(4) == 0 ? pick(@{ $self->{shared} }) : pick(@{ $self->{holders} });
	my $key = "$r\0$h";
	my $lease = pick(@LEASES_MS);
	my $fence = $self->{fence}{$key};
	my $x = rnd(100);
	my $rec;

	if ($x < 22)
	{
		$rec = $self->call('try_lock', 'dlock.try_lock(?, ?, ?)', [ $r, $h, secs($lease) ],
			r => $r, h => $h, lease => $lease);
	}
	elsif ($x < 32)
	{
		my $wait = pick(0, 20, 100, 300);
		$rec = $self->call_proc('lock', 'CALL dlock.lock(?, ?, ?, ?)',
			[ $r, $h, secs($lease), secs($wait) ], r => $r, h => $h, lease => $lease, wait => $wait);
	}
	elsif ($x < 46)
	{
		my ($f, @old) = $self->fence_arg($key);
		$rec = $self->call('unlock', 'dlock.unlock(?, ?, ?)', [ $r, $h, $f ], r => $r, h => $h, f => $f, @old);
	}
	elsif ($x < 58)
	{
		my ($f, @old) = $self->fence_arg($key);
		my $l = rnd(3) ? $lease : undef;
		$rec = $self->call('renew',
			q{TIMESTAMPDIFF(MICROSECOND, '1970-01-01', dlock.renew(?, ?, ?, ?))},
			[ $r, $h, defined $l ? secs($l) : undef, $f ], r => $r, h => $h, lease => $l, f => $f, @old);
	}
	elsif ($x < 61)
	{
		$rec = $self->call('unlock_all', 'dlock.unlock_all(?)', [$h], h => $h);
	}
	elsif ($x < 64)
	{
		$rec = $self->call_proc('reap', 'CALL dlock.reap()', []);
	}
	elsif ($x < 67)
	{
		$rec = $self->call('break_lock', 'dlock.break_lock(?) + 0', [$r], r => $r);
	}
	elsif ($x < 73)
	{
		my ($f) = $self->{dbh}->selectrow_array('SELECT fence FROM dlock.locks WHERE resource = ?',
			undef, $r);
		if (my $bad = $self->read_failed) { return $bad }
		$f = $fence if rnd(2) || !defined $f;
		return undef unless defined $f;
		if (rnd(2))
		{
			$rec = $self->call('check', 'dlock.check_fence(?, ?) + 0', [ $r, $f ], r => $r, f => $f);
		}
		else
		{
			$rec = $self->call('assert_fence', 'dlock.assert_fence(?, ?) + 0', [ $r, $f ],
				r => $r, f => $f);
		}
	}
	elsif ($x < 79)
	{
		# xact_lock is a procedure whose attempts commit on their own in
		# autocommit: only inside transactions (try_xact_lock anywhere).
		if (rnd(2) || !$in_xact)
		{
			$rec = $self->call('try_xact_lock', 'dlock.try_xact_lock(?)', [$r], r => $r);
		}
		else
		{
			my $wait = pick(0, 20, 100);
			$rec = $self->call_proc('xact_lock', 'CALL dlock.xact_lock(?, ?)', [ $r, secs($wait) ],
				r => $r, wait => $wait);
		}
	}
	elsif ($x < 88)
	{
		$rec = $self->steal;
	}
	elsif ($in_xact)
	{
		my $ms = pick(10, 50, 150, 300);
		$rec = $self->call('sleep', 'SLEEP(?) = 0', [ secs($ms) ], ms => $ms);
	}
	else
	{
		return undef;
	}
	return undef unless $rec;
	if (!$rec->{err} && defined $rec->{res} && ($rec->{k} eq 'try_lock' || $rec->{k} eq 'lock'))
	{
		$self->{old}{$key} = $self->{fence}{$key}
		  if defined $self->{fence}{$key} && $self->{fence}{$key} != $rec->{res};
		$self->{fence}{$key} = $rec->{res};
	}
	return $rec;
}

# fence_arg: as ModelDriver.pm's (the last fence, none, or the one before).
sub fence_arg
{
	my ($self, $key) = @_;
	return ($self->{old}{$key}, old => 1) if defined $self->{old}{$key} && rnd(4) == 0;
	return rnd(3) ? $self->{fence}{$key} : undef;
}

# steal: unlock or renew a live holding of another user on this run's
# resources, under the holder text read from dlock.locks: it must get
# 42501 or NULL.
sub steal
{
	my ($self) = @_;
	my $in = join(', ', ('?') x @{ $self->{resources} });
	my $rows = $self->{dbh}->selectall_arrayref(
		qq{SELECT resource, holder, fence FROM dlock.locks
		    WHERE owner <> ? AND NOT expired
		      AND holder NOT LIKE 'shared/%' AND holder NOT LIKE 'probe/%'
		      AND resource IN ($in)
		    ORDER BY resource, holder}, undef, $self->{user}, @{ $self->{resources} });
	if (my $bad = $self->read_failed) { return $bad }
	return undef unless $rows && @$rows;
	my ($r, $h, $f) = @{ pick(@$rows) };
	if (rnd(2))
	{
		return $self->call('unlock', 'dlock.unlock(?, ?, ?)', [ $r, $h, rnd(2) ? $f : undef ],
			r => $r, h => $h, f => undef, steal => 1);
	}
	return $self->call('renew', q{TIMESTAMPDIFF(MICROSECOND, '1970-01-01', dlock.renew(?, ?, 1, ?))},
		[ $r, $h, $f ], r => $r, h => $h, lease => 1000, f => $f, steal => 1);
}

sub finish
{
	my ($self, $recs, $fate, $tlo) = @_;
	my $tdone = $self->{tlast} = now_us($self->{dbh});
	for my $rec (@$recs)
	{
		$rec->{fate} = $rec->{undone} ? 'rollback' : $fate;
		$rec->{ufate} = $fate;
		$rec->{tdone} = $tdone;
		$rec->{tlo} = $tlo // $rec->{t1} // $tdone;
		$rec->{t0} //= $tdone;    # a failed CALL: no bracket, never a holding
		$rec->{t1} //= $tdone;
		print { $self->{log} } $JSON->encode($rec), "\n";
	}
}

sub auto_unit
{
	my ($self) = @_;
	my $rec = $self->random_op(0) or return;
	$rec->{xact} = 0;
	$self->finish([$rec], 'commit', $rec->{t1});
}

# xact_unit: a transaction of a few operations, maybe a savepoint and a
# ROLLBACK TO, ending in COMMIT or ROLLBACK.  An error ends the transaction
# (ROLLBACK) unless a savepoint takes it back: InnoDB rolls back only the
# failed statement (a deadlock: the whole transaction, and the savepoint
# with it, so ROLLBACK TO then fails and the transaction is rolled back).
sub xact_unit
{
	my ($self) = @_;
	my $dbh = $self->{dbh};
	my $iso = rnd(2) ? 'REPEATABLE READ' : 'READ COMMITTED';
	$dbh->do("SET TRANSACTION ISOLATION LEVEL $iso") or die $dbh->errstr;
	$dbh->do('START TRANSACTION') or die $dbh->errstr;
	my (@recs, $sp_at, $aborted, $tlo);
	my $n = 1 + rnd(5);
	for my $i (1 .. $n)
	{
		if (!defined $sp_at && rnd(4) == 0)
		{
			$dbh->do('SAVEPOINT s') or do { $aborted = 1; last };
			$sp_at = scalar @recs;
		}
		my $rec = $self->random_op(1) or next;
		$rec->{xact} = 1;
		$rec->{iso} = $iso;
		push @recs, $rec;
		my $rollback_to = $rec->{err} || rnd(6) == 0;
		if ($rollback_to && defined $sp_at)
		{
			$dbh->do('ROLLBACK TO SAVEPOINT s') or do { $aborted = 1; last };
			$recs[$_]{undone} = 1 for $sp_at .. $#recs;
			$dbh->do('RELEASE SAVEPOINT s');
			undef $sp_at;
		}
		elsif ($rec->{err})
		{
			$aborted = 1;
			last;
		}
	}
	my $fate = 'rollback';
	if (!$aborted)
	{
		$tlo = now_us($dbh);
		if (rnd(10) < 7)
		{
			$fate = $dbh->do('COMMIT') ? 'commit' : 'rollback';
			if ($fate eq 'rollback')
			{
				$_->{commit_err} = $dbh->state for @recs;
				$dbh->do('ROLLBACK');
			}
		}
		else
		{
			$dbh->do('ROLLBACK');
		}
	}
	else
	{
		$dbh->do('ROLLBACK');
	}
	$self->finish(\@recs, $fate, $tlo);
}

# reap_unit: CALL dlock.reap() in a transaction left open a while: it is
# refused (25001, see ok_error in 070_model.t), and the transaction must
# not keep acquirers from expired leases (the prober's) nor hold up new
# resources.
sub reap_unit
{
	my ($self) = @_;
	my $dbh = $self->{dbh};
	my $iso = rnd(2) ? 'REPEATABLE READ' : 'READ COMMITTED';
	$dbh->do("SET TRANSACTION ISOLATION LEVEL $iso") or die $dbh->errstr;
	$dbh->do('START TRANSACTION') or die $dbh->errstr;
	my $rec = $self->call_proc('reap', 'CALL dlock.reap()', []);
	$rec->{xact} = 1;
	$rec->{iso} = $iso;
	$rec->{open} = 1;
	$dbh->do('DO SLEEP(?)', undef, secs(pick(100, 200, 300, 400)));
	my $tlo = $rec->{err} ? undef : now_us($dbh);
	my $ok = !$rec->{err} && $dbh->do('COMMIT');
	$dbh->do('ROLLBACK') unless $ok;
	$self->finish([$rec], $ok ? 'commit' : 'rollback', $tlo);
}

# probe_unit: as ModelDriver.pm's.
sub probe_unit
{
	my ($self) = @_;
	my $dbh = $self->{dbh};
	my $r = $self->{probe};
	my $lease = pick(50, 100, 200);
	my $h = "probe/h" . ($self->{unit} % 2);
	my $rec = $self->call('try_lock', 'dlock.try_lock(?, ?, ?)', [ $r, $h, secs($lease) ],
		r => $r, h => $h, lease => $lease, probe => 1);
	$rec->{xact} = 0;
	$self->finish([$rec], 'commit', $rec->{t1});
	return if $rec->{err} || !defined $rec->{res};
	if (rnd(4) == 0)
	{
		$self->{unit}++;
		my $u = $self->call('unlock', 'dlock.unlock(?, ?, ?)', [ $r, $h, $rec->{res} ],
			r => $r, h => $h, f => $rec->{res}, probe => 1);
		$u->{xact} = 0;
		$self->finish([$u], 'commit', $u->{t1});
	}
	my $until = $rec->{t1} + $lease * 1000 + 5000;
	while ((my $now = now_us($dbh)) < $until)
	{
		usleep(List::Util::min(($until - $now), 50_000));
	}
	$self->{unit}++;
	my $h2 = "probe/h" . ($self->{unit} % 2);
	my $p = $self->call('try_lock', 'dlock.try_lock(?, ?, ?)', [ $r, $h2, secs($lease) ],
		r => $r, h => $h2, lease => $lease, probe => 1, expect_free => 1);
	$p->{xact} = 0;
	$self->finish([$p], 'commit', $p->{t1});
	if (!$p->{err} && defined $p->{res})
	{
		$self->{unit}++;
		my $u = $self->call('unlock', 'dlock.unlock(?, ?, ?)', [ $r, $h2, $p->{res} ],
			r => $r, h => $h2, f => $p->{res}, probe => 1);
		$u->{xact} = 0;
		$self->finish([$u], 'commit', $u->{t1});
	}
}

sub run
{
	my ($self) = @_;
	srand($self->{seed});
	open($self->{log}, '>', $self->{logfile}) or die "$self->{logfile}: $!\n";
	$self->{log}->autoflush(1);
	$self->{dbh} = connect_as($self->{sock}, $self->{user}, $self->{pass});
	($self->{tid}) = $self->{dbh}->selectrow_array('SELECT CONNECTION_ID()');
	$self->{start} //= time;
	my $end = $self->{start} + $self->{seconds};
	while (time < $end)
	{
		$self->{unit}++;
		if ($self->{probe})
		{
			$self->probe_unit;
			next;
		}
		my $x = rnd(100);
		if ($x < 55) { $self->auto_unit }
		elsif ($x < 93) { $self->xact_unit }
		else { $self->reap_unit }
	}
	$self->{dbh}->disconnect;
	close $self->{log};
}

# monitor(sock, user, pass, logfile, seconds): the waits monitor: every
# 110 ms, the connections whose transaction waits for a row lock, the
# statement waiting and the connection it waits for, with the server
# clock, one JSON line each ({t, tid, q, by, ws: when the wait started,
# INNODB_TRX's trx_wait_started, NULL for a request queued but not waited
# for, see mark_waits; lk: the locks wanted and
# held; trx, same: the waiting transaction's id and how many transactions
# INNODB_TRX lists under it; btrx, bsame: the same for the blocking one,
# one line per connection listed under that id}).  InnoDB serves
# information_schema.INNODB_TRX and INNODB_LOCK_WAITS from a cache it
# refreshes when read at least 100 ms after its last refresh: read every
# 110 ms, it is as of the read (more often, up to 100 ms stale).  So waits
# shorter than that may go unseen; longer ones are seen.
sub monitor
{
	my ($sock, $user, $pass, $logfile, $seconds) = @_;
	my $dbh = connect_as($sock, $user, $pass);
	open(my $log, '>', $logfile) or die "$logfile: $!\n";
	$log->autoflush(1);
	my $sth = $dbh->prepare(
		qq{SELECT $T, r.trx_mysql_thread_id, LEFT(r.trx_query, 300), b.trx_mysql_thread_id, r.trx_wait_started,
		          CONCAT_WS(' ', rl.lock_mode, 'wants', rl.lock_table, rl.lock_index, rl.lock_data, '; held', bl.lock_mode),
		          r.trx_id, (SELECT COUNT(*) FROM information_schema.INNODB_TRX x WHERE x.trx_id = r.trx_id),
		          w.blocking_trx_id, (SELECT COUNT(*) FROM information_schema.INNODB_TRX x WHERE x.trx_id = w.blocking_trx_id),
		          b.trx_lock_structs, b.trx_rows_locked
		     FROM information_schema.INNODB_LOCK_WAITS w
		     JOIN information_schema.INNODB_TRX r ON r.trx_id = w.requesting_trx_id
		     LEFT JOIN information_schema.INNODB_TRX b ON b.trx_id = w.blocking_trx_id
		     LEFT JOIN information_schema.INNODB_LOCKS rl ON rl.lock_id = w.requested_lock_id
		     LEFT JOIN information_schema.INNODB_LOCKS bl ON bl.lock_id = w.blocking_lock_id});
	my $end = time + $seconds;
	my $poll = 0;
	while (time < $end)
	{
		$sth->execute or die $dbh->errstr;
		$poll++;
		while (my ($t, $tid, $q, $by, $ws, $lk, $trx, $same, $btrx, $bsame, $bls, $brl) = $sth->fetchrow_array)
		{
			print $log $JSON->encode({ p => $poll, t => $t, tid => $tid, q => $q, by => $by, ws => $ws, lk => $lk,
				trx => $trx, same => $same, btrx => $btrx, bsame => $bsame, bls => $bls, brl => $brl }), "\n";
		}
		usleep(110_000);
	}
	close $log;
	$dbh->disconnect;
}

# utc_seconds('YYYY-MM-DD HH:MM:SS'): that UTC time in seconds since the
# epoch (undef for anything else).
sub utc_seconds
{
	my ($s) = @_;
	my @f = ($s // '') =~ /^(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)/ or return undef;
	return Time::Local::timegm($f[5], $f[4], $f[3], $f[2], $f[1] - 1, $f[0]);
}

# mark_waits(ops, waits logfile): set waited on the operations running
# ([t0, t1]) on a connection seen waiting inside a dlock routine, and on
# those ended by a lock wait timeout or a deadlock (blocker: the connection
# it waited for, wq: the statement that waited).  A renew, unlock or
# unlock_all may wait only for a transaction that pinned (assert_fence) or
# changed that very holding before the wait was seen: the same holder text
# on that resource (re-entry, renew, unlock, unlock_all: the holder's own
# other transaction), a pin of its fence (on the resource the waiting
# statement names) or a break_lock of it (README, MySQL "Traps"); an
# unlock or unlock_all seen waiting for anything else is marked nowait, a
# renew waiting only for those is not.  Sightings of statements that are
# not dlock's, or that do not name the operation's resource, are left out
# (the wait state may be older than the statement text: the cache).
# A blocking transaction id INNODB_TRX gives to several connections (seen
# on MariaDB 10.11: the holder's own assert_fence pin listed under one id
# with two unrelated connections) names them all: the wait is allowed if
# one of them pinned or changed the holding; blockers of distinct ids must
# each be allowed.  A transaction that wrote nothing has id 0 there, so
# every open one is listed (MariaDB 11.8, seed 1118433950: an assert_fence
# pin of the very holding and an unrelated transaction).  One sighting is
# one poll of the monitor (p): each of its rows has its own time t.
# A wait in _reaper_wait (dlock.reapers AS waiting) is a wait for the
# reaper, allowed by design (seed 1223718088, MariaDB 11.8: a try_lock
# flagged); counted apart (the fourth result).
# A sighting without a wait start (ws null) is a lock request InnoDB queued
# and withdrew without waiting: MariaDB's SKIP LOCKED queues a waiting
# request for every row another transaction holds, then takes it back and
# skips the row (INNODB_METRICS lock_rec_lock_waits counts one per skipped
# row, Innodb_row_lock_waits none; test/mysql/t/042_skip_locked_queue.t),
# and INNODB_LOCK_WAITS shows it in between; a statement that waits shows
# the start of its wait from its first moment in it.  Those are left out,
# in SKIP LOCKED reads only (what queues them): elsewhere a sighting
# without a wait start still counts as a wait.  So are such sightings
# whose wait start lies in a second before the one the operation began
# in: InnoDB sets it only when a wait begins (lock_wait() sets
# trx->lock.suspend_time) and never clears it, so on a connection that
# waited before, a request queued and withdrawn shows the start of that
# old wait (MariaDB 10.11 and 11.8; seed 1307336578: a lock(wait 0) seen
# at 12:40:54 with a wait start of 12:40:48).  A wait of the operation
# itself starts after its t0.
# Returns the number of sightings inside no operation (none expected), of
# those left out because INNODB_TRX gave their transaction id to several
# connections, and of those left out as queued, not waited for.
sub mark_waits
{
	my ($ops, $logfile) = @_;
	my (%by_tid, %client_of, %units, %fence_of);
	for my $o (@$ops)
	{
		$o->{waited} = 1 if defined $o->{errno} && ($o->{errno} == 1205 || $o->{errno} == 1213);
		# The fences each user's holder was given on each resource.
		$fence_of{"$o->{role}\0$o->{h}\0$o->{r}\0$o->{res}"} = 1
		  if ($o->{k} eq 'try_lock' || $o->{k} eq 'lock') && !defined $o->{err} && defined $o->{res}
		  && defined $o->{role} && defined $o->{h} && defined $o->{r};
		next unless defined $o->{tid};
		$client_of{ $o->{tid} } = $o->{c};
		my ($lo, $hi) = defined $o->{err} ? @$o{qw(t0e t1e)} : @$o{qw(t0 t1)};
		push @{ $by_tid{ $o->{tid} } }, [ $lo, $hi, $o ] if defined $lo && defined $hi;
		push @{ $units{ $o->{c} }{ $o->{u} } }, $o if $o->{xact};
	}
	# touches(op, x, wr): did x (of another transaction) pin or change the
	# holding op waits to change (on resource wr, named by the statement
	# that waited: unlock_all names none)?  A pin counts only if its fence
	# is one op's user and holder were given on that resource.
	my $touches = sub {
		my ($o, $x, $wr) = @_;
		return 0 if defined $x->{err};
		my $same_r = !defined $o->{r} || (defined $x->{r} && $x->{r} eq $o->{r});
		my $same_h = defined $x->{h} && $x->{h} eq $o->{h};
		$wr = $o->{r} // $wr;
		return 1 if $x->{k} eq 'assert_fence' && defined $wr && defined $x->{r} && $x->{r} eq $wr
		  && defined $x->{f} && $fence_of{"$o->{role}\0$o->{h}\0$wr\0$x->{f}"};
		return 1 if $x->{k} eq 'break_lock' && $x->{res} && $same_r;
		return 1 if $x->{k} eq 'unlock_all' && $x->{res} && $same_h;
		return 1 if $same_r && $same_h && defined $x->{res}
		  && ($x->{k} eq 'try_lock' || $x->{k} eq 'lock' || $x->{k} eq 'renew' || $x->{k} eq 'unlock');
		return 0;
	};
	my %holding_call = map { $_ => 1 } qw(renew unlock unlock_all);
	my ($stray, $ambiguous, $queued, $reaper) = (0, 0, 0, 0);
	# Per sighting of a holding call and blocking transaction id (one line
	# per connection listed under it): [operation, allowed by any].
	my %verdict;
	open(my $fh, '<', $logfile) or return (0, 0);
	while (my $line = <$fh>)
	{
		my $w = eval { decode_json($line) } or next;
		next unless ($w->{q} // '') =~ /dlock/i;
		if (exists $w->{ws} && !defined $w->{ws} && $w->{q} =~ /SKIP\s+LOCKED/i)
		{
			$queued++;
			next;
		}
		# INNODB_TRX may list several transactions under one id (seen on
		# MariaDB 10.11: a SLEEP and a consistent read "waiting" for the
		# lock an assert_fence waited for): which of them waits is unknown.
		if (($w->{same} // 1) > 1)
		{
			$ambiguous++;
			next;
		}
		my $list = $by_tid{ $w->{tid} } or next;
		my ($o) = map { $_->[2] } grep { $_->[0] <= $w->{t} && $w->{t} <= $_->[1] } @$list;
		if (!$o)
		{
			$stray++;
			next;
		}
		# The statement that waited names the operation's resource (as a
		# quoted literal) when it has one: a sighting whose wait state was
		# older than its statement text is not taken for another call's.
		next if defined $o->{r} && index($w->{q}, "'$o->{r}'") < 0;
		# _reaper_wait: an acquirer that finds a row locked by the reaper
		# waits for its few statements, on the slot's row of dlock.reapers
		# that only reap() locks exclusively (docs/editions/mysql.md): by
		# design, not a wait for a user's transaction.
		if ($w->{q} =~ /\bdlock\.reapers\s+AS\s+waiting\b/i)
		{
			$reaper++;
			next;
		}
		if ($w->{q} =~ /SKIP\s+LOCKED/i && defined(my $ws = utc_seconds($w->{ws})))
		{
			my $lo = defined $o->{err} ? $o->{t0e} : $o->{t0};
			if (($ws + 1) * 1_000_000 <= $lo)
			{
				$queued++;
				next;
			}
		}
		$o->{waited} = 1;
		$o->{wq} //= $w->{q};
		$o->{wlock} //= $w->{lk};
		$o->{blocker} //= "c$client_of{ $w->{by} }" if defined $w->{by} && defined $client_of{ $w->{by} };
		next unless $holding_call{ $o->{k} };
		my ($wr) = $w->{q} =~ /\bresource\s*=\s*(?:NAME_CONST\('\w+',\s*)?(?:_\w+)?'([^']*)'/;
		# The blocker's transactions open then: did one pin or change it?
		my $ok = defined $w->{by} && defined $client_of{ $w->{by} } && grep {
			my @u = @$_;
			my ($t0) = sort { $a <=> $b } map { $_->{t0} } @u;
			$t0 <= $w->{t} && $w->{t} <= $u[0]{tdone}
			  && grep { $_->{t0} <= $w->{t} && $touches->($o, $_, $wr) } @u
		} values %{ $units{ $client_of{ $w->{by} } } };
		# One sighting: one poll (p; each row has its own t) of one waiter.
		my $key = !defined $w->{btrx} ? "$line"
		  : join("\0", $w->{p} // "t$w->{t}", $w->{tid}, $w->{btrx});
		my $v = $verdict{$key} //= [ $o, 0, {} ];
		$v->[1] ||= $ok ? 1 : 0;
		$v->[2]{"c$client_of{ $w->{by} }"} = 1 if defined $w->{by} && defined $client_of{ $w->{by} };
		$o->{bkey} //= $key;
	}
	close $fh;
	for my $key (keys %verdict)
	{
		my $v = $verdict{$key};
		my $o = $v->[0];
		$o->{bad_wait} = 1 unless $v->[1];
		# The first sighting's candidates, all of them: c2|c3.
		$o->{blocker} = join('|', sort keys %{ $v->[2] }) if $o->{bkey} eq $key && %{ $v->[2] };
	}
	delete $_->{bkey} for @$ops;
	for my $o (grep { $holding_call{ $_->{k} } && $_->{waited} } @$ops)
	{
		if ($o->{bad_wait}) { $o->{nowait} = 1 }
		elsif (!defined $o->{errno} || ($o->{errno} != 1205 && $o->{errno} != 1213)) { delete $o->{nowait} }
	}
	return ($stray, $ambiguous, $queued, $reaper);
}

1;
