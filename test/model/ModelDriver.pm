# ModelDriver.pm: the clients of dlock's randomized, model-checked workload.
#
# Each client is a forked process with its own DBD::Pg connection, playing
# random operations (try_lock, lock, unlock, renew, unlock_all, reap,
# break_lock, check, assert_fence, xact_lock, try_xact_lock, and "steals":
# unlock/renew of another role's holding read from dlock.locks) on a few
# resources with short leases, in autocommit and in transactions (READ
# COMMITTED or SERIALIZABLE, with savepoints, ROLLBACK TO, and rollbacks).
# Now and then an unlock or renew passes the fence before the last one the
# client saw for its holder text (fence_arg: old => 1).
# The kinds of lock the installed extension has (looked up in pg_proc at
# the first operation, detect_kinds) are mixed in: shared acquisitions
# (0.4: try_lock/lock with shared => true, so the same holder texts also
# re-enter, downgrade and upgrade, and shared holders of different texts
# cross their upgrades), semaphore permits on resources of their own
# (try_acquire/acquire, 0.5) and several lock resources at once
# (try_lock_all/lock_all, 0.5, whose NULL result is followed by a read of
# the caller's private holdings of those resources: field after).
# When the edition has sessions (detect_kinds: dlock.open_session), 0.2 of
# the operations are about sessions (sess_op): open one (ttl 50 ms to 1 s,
# a holder text of its own, sess/ROLE/cN/sM), take holdings in it (every
# kind above, session => id, no lease), keepalive, close_session, renew,
# unlock, check and assert_fence of its holdings, and keepalive or close
# of another role's session (a steal: 42501 or NULL).  Sessions lapse when
# not kept alive.  Their records carry sess (the session's id).
# One client is the prober: alone on its own resource, it lets its lease
# run out and then checks that the resource is free at once, while other
# clients keep reap() open in transactions.
#
# Every operation is logged, one JSON line each, to the client's own file
# with the server clock read in the same statement right before and after
# the call (t0, t1), the fate of its transaction (commit or rollback), a
# server clock read before the transaction ended (tlo) and one after its
# end was acknowledged (tdone).  ModelCheck.pm reads these logs.  Random
# choices come from a per-client seed derived from the run's seed.
#
# Against the portable edition (portable => 1; its records say pt => 1)
# the workload keeps to that edition's documented rules: reap() runs only
# in a transaction of its own (the portable reap() holds the rows it
# deletes until its transaction ends, so an expired lease reaped in a
# transaction left open is busy meanwhile), and a lock(), xact_lock(),
# acquire() or lock_all() that would wait under SERIALIZABLE raises 0A000
# (ModelCheck.pm accepts that error there).

package ModelDriver;

use strict;
use warnings;

use DBI;
use DBD::Pg;
use JSON::PP;
use POSIX ();
use Time::HiRes qw(time usleep);

# The server clock in microseconds since the epoch, as an int8.
my $T = q{(extract(epoch FROM pg_catalog.clock_timestamp()) * 1000000)::int8};

my @LEASES_MS = (50, 100, 200, 500, 1000);
my $JSON = JSON::PP->new->canonical;

# connect_as: a connection as role (undef: the conninfo's user), autocommit.
sub connect_as
{
	my ($conninfo, $role) = @_;
	my $dsn = "dbi:Pg:$conninfo";
	my $dbh = DBI->connect($dsn, defined $role ? $role : '', '',
		{ AutoCommit => 1, RaiseError => 0, PrintError => 0, PrintWarn => 0 })
	  or die "cannot connect as " . ($role // 'default') . ": $DBI::errstr\n";
	$dbh->do(q{SET statement_timeout = '20s'});
	$dbh->do(q{SET lock_timeout = '10s'});
	return $dbh;
}

# now_us: the server clock.
sub now_us
{
	my ($dbh) = @_;
	my ($t) = $dbh->selectrow_array("SELECT $T");
	die "cannot read the server clock: " . ($dbh->errstr // '') . "\n"
	  unless defined $t;
	return $t;
}

# Client object: conninfo, role, is_super, id, seed, seconds, resources,
# tag (the run's; ends its holder texts), probe (resource, for the
# prober), logfile, can_break, portable.
sub new
{
	my ($class, %a) = @_;
	my $self = bless {%a}, $class;
	# Holder texts end in "\@tag" (the run's tag, as its resources begin
	# with it): runs sharing a database must not touch each other's
	# holdings, and unlock_all(holder) spans every resource, so holder
	# texts equal across runs (role/cN/hM) let one run's unlock_all end
	# another's holdings unlogged, which its checker then took for dlock
	# defects.  ModelCheck.pm's private-holder test reads the prefix.
	my $tag = defined $a{tag} ? "\@$a{tag}" : '';
	$self->{holders} = [ map { "$a{role}/c$a{id}/h$_$tag" } 0 .. 1 ];
	$self->{shared} = [ map { "shared/h$_$tag" } 0 .. 1 ];
	# Semaphores (when the extension has them): resources of their own,
	# each always called with the same max_permits.
	$self->{sems} = [ map { ($a{tag} // 'm') . "/s$_" } 0 .. 1 ];
	$self->{max_permits} = { map { $self->{sems}[$_] => 2 + $_ } 0 .. 1 };
	$self->{fence} = {};    # "r\0h" => last fence this client saw returned
	$self->{old} = {};      # "r\0h" => the one it saw before that
	$self->{sessions} = []; # { id, h, ttl }: the sessions this client opened
	$self->{tag} //= '';
	$self->{seq} = 0;
	$self->{unit} = 0;
	return $self;
}

sub rnd { my ($n) = @_; return int(rand($n)); }
sub pick { my @a = @_; return $a[ rnd(scalar @a) ]; }

# call: run one operation statement "SELECT t0, call, t1"; returns an op
# record (res or err set).
sub call
{
	my ($self, $op, $sql, $binds, %f) = @_;
	my $dbh = $self->{dbh};
	my $rec = {
		c => $self->{id}, role => $self->{role}, su => $self->{is_super} ? 1 : 0,
		u => $self->{unit}, n => $self->{seq}++, k => $op,
		($self->{portable} ? (pt => 1) : ()), %f
	};
	my $row = $dbh->selectrow_arrayref("SELECT $T, $sql, $T", undef, @$binds);
	$self->{calls}++;
	if ($row)
	{
		($rec->{t0}, $rec->{res}, $rec->{t1}) = @$row;
		$self->{old_refused}++ if $f{old} && !defined $rec->{res};
	}
	else
	{
		$rec->{err} = $dbh->state || 'XXXXX';
		$rec->{msg} = $dbh->errstr;
	}
	return $rec;
}

sub lease_arg { my ($ms) = @_; return "$ms milliseconds"; }

# read_failed: the record of a failed read of dlock.locks (not an
# operation, but it aborts the transaction like one).
sub read_failed
{
	my ($self) = @_;
	my $dbh = $self->{dbh};
	return undef unless $dbh->err;
	return { c => $self->{id}, role => $self->{role}, su => $self->{is_super} ? 1 : 0,
		u => $self->{unit}, n => $self->{seq}++, k => 'read',
		err => $dbh->state || 'XXXXX', msg => $dbh->errstr };
}

# detect_kinds: which kinds of lock the installed extension has (by the
# functions' argument names in pg_proc): shared, semaphores, multi.
sub detect_kinds
{
	my ($self) = @_;
	my $rows = $self->{dbh}->selectall_arrayref(
		q{SELECT p.proname, array_to_string(p.proargnames, ',')
		    FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
		   WHERE n.nspname = 'dlock'
		     AND p.proname IN ('try_lock', 'try_acquire', 'acquire', 'try_lock_all', 'lock_all',
		                       'open_session')});
	my %k;
	for my $row (@{ $rows || [] })
	{
		my ($name, $args) = @$row;
		$args //= '';
		$k{shared} = 1 if $name eq 'try_lock' && $args =~ /\bshared\b/;
		$k{session} = 1 if $name eq 'try_lock' && $args =~ /\bsession\b/;
		$k{$name} = 1 if $name ne 'try_lock' && $args =~ /\bholder\b/;
	}
	my $multi = $k{try_lock_all} && $k{lock_all} && $k{shared} ? 1 : 0;
	return {
		shared => $k{shared} ? 1 : 0,
		sem => $k{try_acquire} && $k{acquire} ? 1 : 0,
		multi => $multi,
		# sessions, with every kind of acquisition
		sess => $k{open_session} && $k{session} && $multi && $k{try_acquire} ? 1 : 0
	};
}

# random_op: one random operation (returns its record, undef for none).
sub random_op
{
	my ($self, $in_xact) = @_;
	my $kinds = $self->{kinds} //= $self->detect_kinds;
	my @sems = $kinds->{sem} ? @{ $self->{sems} } : ();
	my $r = pick(@{ $self->{resources} });
	my $h = rnd(4) == 0 ? pick(@{ $self->{shared} }) : pick(@{ $self->{holders} });
	my $lease = pick(@LEASES_MS);
	my $x = rnd(100);
	# Half the unlocks and a quarter of the single acquisitions go to this
	# client's last holding: re-entries, and releases whose count the
	# checker knows (else most unlocks meet nothing, or an expired lease).
	($r, $h) = @{ $self->{last} }
	  if $self->{last} && ($x < 32 ? rnd(4) == 0 : $x < 46 && rnd(2));
	# unlock, renew, check and assert_fence work on every kind.
	$r = pick(@sems) if @sems && $x >= 32 && $x < 73 && rnd(4) == 0;
	my $key = "$r\0$h";
	my $fence = $self->{fence}{$key};
	my $sh = $kinds->{shared} && rnd(3) == 0 ? 1 : 0;
	my $rec;

	if ($kinds->{sess} && rnd(100) < 20)
	{
		$rec = $self->sess_op($in_xact);
	}
	elsif ($x < 22 && @sems && rnd(5) == 0)
	{
		$rec = $self->sem_op($h, $lease);
	}
	elsif ($x < 22 && $kinds->{multi} && rnd(6) == 0)
	{
		$rec = $self->multi_op($h, $lease, $sh);
	}
	elsif ($x < 22)
	{
		$rec = $sh
		  ? $self->call('try_lock', 'dlock.try_lock($1, $2, $3::interval, shared => true)',
			[ $r, $h, lease_arg($lease) ], r => $r, h => $h, lease => $lease, sh => 1)
		  : $self->call('try_lock', 'dlock.try_lock($1, $2, $3::interval)',
			[ $r, $h, lease_arg($lease) ], r => $r, h => $h, lease => $lease);
	}
	elsif ($x < 32)
	{
		my $wait = pick(0, 20, 100, 300);
		$rec = $self->call('lock',
			'dlock.lock($1, $2, $3::interval, $4::interval' . ($sh ? ', shared => true)' : ')'),
			[ $r, $h, lease_arg($lease), lease_arg($wait) ],
			r => $r, h => $h, lease => $lease, wait => $wait, $sh ? (sh => 1) : ());
	}
	elsif ($x < 46)
	{
		my ($f, @old) = $self->fence_arg($key);
		$rec = $self->call('unlock', 'dlock.unlock($1, $2, $3::int8)',
			[ $r, $h, $f ], r => $r, h => $h, f => $f, @old);
	}
	elsif ($x < 58)
	{
		my ($f, @old) = $self->fence_arg($key);
		my $l = rnd(3) ? $lease : undef;
		$rec = $self->call('renew',
			"(extract(epoch FROM dlock.renew(\$1, \$2, \$3::interval, \$4::int8)) * 1000000)::int8",
			[ $r, $h, defined $l ? lease_arg($l) : undef, $f ],
			r => $r, h => $h, lease => $l, f => $f, @old);
	}
	elsif ($x < 61)
	{
		$rec = $self->call('unlock_all', 'dlock.unlock_all($1)', [$h], h => $h);
	}
	elsif ($x < 64)
	{
		return undef if $in_xact && $self->{portable};
		$rec = $self->call('reap', 'dlock.reap()', []);
	}
	elsif ($x < 67)
	{
		$rec = $self->call('break_lock', 'dlock.break_lock($1)::int', [$r], r => $r);
	}
	elsif ($x < 73)
	{
		my ($f) = $self->{dbh}->selectrow_array(
			'SELECT fence FROM dlock.locks WHERE resource = $1', undef, $r);
		if (my $bad = $self->read_failed) { return $bad }
		$f = $fence if rnd(2) || !defined $f;
		return undef unless defined $f;
		my $which = rnd(2) ? 'check' : 'assert_fence';
		my $sql = $which eq 'check' ? 'dlock."check"($1, $2)::int'
		  : '(dlock.assert_fence($1, $2) IS NULL)::int';
		$rec = $self->call($which, $sql, [ $r, $f ], r => $r, f => $f);
	}
	elsif ($x < 79)
	{
		if (rnd(2))
		{
			$rec = $self->call('try_xact_lock', 'dlock.try_xact_lock($1)', [$r], r => $r);
		}
		else
		{
			my $wait = pick(0, 20, 100);
			$rec = $self->call('xact_lock', 'dlock.xact_lock($1, $2::interval)',
				[ $r, lease_arg($wait) ], r => $r, wait => $wait);
		}
	}
	elsif ($x < 88)
	{
		$rec = $self->steal;
	}
	elsif ($in_xact)
	{
		my $ms = pick(10, 50, 150, 300);
		$rec = $self->call('sleep', "pg_sleep($ms / 1000.0) IS NULL", [], ms => $ms);
	}
	else
	{
		return undef;
	}
	return undef unless $rec;
	if (!$rec->{err} && defined $rec->{res}
		&& $rec->{k} =~ /^(?:try_lock|lock|try_acquire|acquire)$/)
	{
		my $k = "$rec->{r}\0$rec->{h}";
		$self->{old}{$k} = $self->{fence}{$k}
		  if defined $self->{fence}{$k} && $self->{fence}{$k} != $rec->{res};
		$self->{fence}{$k} = $rec->{res};
		$self->{last} = [ $rec->{r}, $rec->{h} ] if $rec->{k} =~ /lock\z/ && !defined $rec->{sess};
	}
	if (!$rec->{err} && ref $rec->{res})
	{
		$self->{fence}{"$rec->{rs}[$_]\0$rec->{h}"} = $rec->{res}[$_] for 0 .. $#{ $rec->{rs} };
	}
	return $rec;
}

# fence_arg: the fence an unlock or renew of key passes: the last one this
# client saw (2 in 3), none, or now and then the one before (old => 1): a
# call under an old fence must change nothing (ModelCheck.pm: stale-fence)
# even when the holder text holds the resource again.
sub fence_arg
{
	my ($self, $key) = @_;
	return ($self->{old}{$key}, old => 1) if defined $self->{old}{$key} && rnd(4) == 0;
	return rnd(3) ? $self->{fence}{$key} : undef;
}

# sess_op: an operation about sessions (see the header); undef for none.
# Holdings in a session carry the session's holder text (its own, so the
# checker finds a holding's session by it) and no lease.
sub sess_op
{
	my ($self, $in_xact) = @_;
	my $ss = $self->{sessions};
	# Mostly a session believed live (by this client's clock: its last
	# expiry seen, less a margin), sometimes one that has ended.
	my @live = grep { !$_->{dead} && time < $_->{until} } @$ss;
	if (!@$ss || rnd(12) == 0 || (!@live && rnd(2)))
	{
		my $ttl = pick(@LEASES_MS, 500, 1000, 1000);
		my $h = "sess/$self->{role}/c$self->{id}/s" . $self->{seq} . ($self->{tag} ne '' ? "\@$self->{tag}" : '');
		my $t = time;
		my $rec = $self->call('open_session', 'dlock.open_session($1::interval, $2)',
			[ lease_arg($ttl), $h ], h => $h, ttl => $ttl);
		if (!$rec->{err} && defined $rec->{res})
		{
			$rec->{sess} = $rec->{res};
			push @$ss, { id => $rec->{res}, h => $h, ttl => $ttl, until => $t + $ttl / 1000 * 0.8 };
			# at most four: an ended one goes first, else the oldest
			if (@$ss > 4)
			{
				my ($i) = grep { $ss->[$_]{dead} || time >= $ss->[$_]{until} } 0 .. $#$ss;
				splice(@$ss, $i // 0, 1);
			}
		}
		return $rec;
	}
	my $s = @live && rnd(5) ? pick(@live) : pick(@$ss);
	my $rec = $self->sess_call($s, $in_xact);
	if ($rec && !$rec->{err} && !$rec->{steal})
	{
		# What the client learns of its session (an estimate: rollbacks
		# aside; it only steers the choices).
		$s->{dead} = 1 if ($rec->{k} =~ /^(?:keepalive|close_session)$/ && !defined $rec->{res})
		  || $rec->{k} eq 'close_session';
		$s->{until} = time + $s->{ttl} / 1000 * 0.8 if $rec->{k} =~ /^(?:keepalive|renew)$/ && defined $rec->{res};
	}
	$s->{dead} = 1 if $rec && ($rec->{err} // '') eq '55000';
	return $rec;
}

# sess_call: one operation in session s (see sess_op).
sub sess_call
{
	my ($self, $s, $in_xact) = @_;
	my ($id, $h) = ($s->{id}, $s->{h});
	my %sf = (sess => $id);
	my $y = rnd(100);
	# (the chaos workload: exclusive holdings only, ChaosDriver.pm)
	my $excl = $self->{kinds}{sess_only_exclusive};
	my @sems = $excl ? () : @{ $self->{sems} };
	my $r = pick(@{ $self->{resources} });
	if ($y < 45)
	{
		my $z = $excl ? 4 + rnd(6) : rnd(10);
		my $sh = !$excl && rnd(3) == 0 ? 1 : 0;
		my $wait = pick(0, 20, 100, 300);
		if ($z < 2)
		{
			my $sem = pick(@sems);
			my %f = (r => $sem, h => $h, max => $self->{max_permits}{$sem}, permits => 1 + rnd(2), %sf);
			return $self->call('try_acquire',
				'dlock.try_acquire($1, $2, max_permits => $3::int, permits => $4::int, session => $5::int8)',
				[ $sem, $h, $f{max}, $f{permits}, $id ], %f)
			  if rnd(2);
			return $self->call('acquire',
				'dlock.acquire($1, $2, max_permits => $3::int, permits => $4::int, '
				  . 'wait => $5::interval, session => $6::int8)',
				[ $sem, $h, $f{max}, $f{permits}, lease_arg($wait), $id ], %f, wait => $wait);
		}
		if ($z < 4)
		{
			my @all = @{ $self->{resources} };
			my @rs;
			push @rs, splice(@all, rnd(scalar @all), 1) for 1 .. 2;
			my %f = (rs => \@rs, h => $h, $sh ? (sh => 1) : (), %sf);
			return $self->call('try_lock_all',
				'dlock.try_lock_all($1::text[], $2, shared => $3::boolean, session => $4::int8)',
				[ \@rs, $h, $sh ? 1 : 0, $id ], %f)
			  if rnd(2);
			return $self->call('lock_all',
				'dlock.lock_all($1::text[], $2, shared => $3::boolean, wait => $4::interval, session => $5::int8)',
				[ \@rs, $h, $sh ? 1 : 0, lease_arg($wait), $id ], %f, wait => $wait);
		}
		my %f = (r => $r, h => $h, $sh ? (sh => 1) : (), %sf);
		return $self->call('try_lock', 'dlock.try_lock($1, $2, shared => $3::boolean, session => $4::int8)',
			[ $r, $h, $sh ? 1 : 0, $id ], %f)
		  if $z < 7;
		return $self->call('lock',
			'dlock.lock($1, $2, shared => $3::boolean, wait => $4::interval, session => $5::int8)',
			[ $r, $h, $sh ? 1 : 0, lease_arg($wait), $id ], %f, wait => $wait);
	}
	if ($y < 60)
	{
		return $self->call('keepalive', '(extract(epoch FROM dlock.keepalive($1::int8)) * 1000000)::int8',
			[$id], %sf);
	}
	if ($y < 65)
	{
		my $rec = $self->call('close_session', 'dlock.close_session($1::int8)', [$id], %sf);
		return $rec;
	}
	if ($y < 92)
	{
		# renew, unlock, check or assert_fence of a holding in the session
		# (mostly of a resource it was seen to hold)
		my @held = map { (split /\0/)[0] } grep { /\0\Q$h\E\z/ } sort keys %{ $self->{fence} };
		$r = @held && rnd(4) ? pick(@held) : @sems && rnd(4) == 0 ? pick(@sems) : $r;
		my $fence = $self->{fence}{"$r\0$h"};
		if ($y < 73)
		{
			my $f = rnd(3) ? $fence : undef;
			return $self->call('renew',
				"(extract(epoch FROM dlock.renew(\$1, \$2, NULL, \$3::int8)) * 1000000)::int8",
				[ $r, $h, $f ], r => $r, h => $h, f => $f, %sf);
		}
		if ($y < 82)
		{
			my $f = rnd(3) ? $fence : undef;
			return $self->call('unlock', 'dlock.unlock($1, $2, $3::int8)', [ $r, $h, $f ],
				r => $r, h => $h, f => $f, %sf);
		}
		return undef unless defined $fence;
		return $self->call('check', 'dlock."check"($1, $2)::int', [ $r, $fence ], r => $r, f => $fence, %sf)
		  if rnd(2);
		return $self->call('assert_fence', '(dlock.assert_fence($1, $2) IS NULL)::int', [ $r, $fence ],
			r => $r, f => $fence, %sf);
	}
	# Another role's session of this run: keepalive or close, 42501 or
	# NULL (a superuser may: it does not try).
	return undef if $self->{is_super};
	my $rows = $self->{dbh}->selectall_arrayref(
		q{SELECT id FROM dlock.sessions
		   WHERE owner::text <> current_user AND holder LIKE 'sess/%' AND holder LIKE '%' || $1
		   ORDER BY id}, undef, $self->{tag} ne '' ? "\@$self->{tag}" : '');
	if (my $bad = $self->read_failed) { return $bad }
	return undef unless $rows && @$rows;
	my $other = pick(map { $_->[0] } @$rows);
	return $self->call('keepalive', '(extract(epoch FROM dlock.keepalive($1::int8)) * 1000000)::int8',
		[$other], sess => $other, steal => 1)
	  if rnd(2);
	return $self->call('close_session', 'dlock.close_session($1::int8)', [$other], sess => $other, steal => 1);
}

# sem_op: try_acquire or acquire of 1 or 2 permits of a semaphore (0.5).
sub sem_op
{
	my ($self, $h, $lease) = @_;
	my $s = pick(@{ $self->{sems} });
	my $max = $self->{max_permits}{$s};
	my $permits = 1 + rnd(2);
	my %f = (r => $s, h => $h, lease => $lease, max => $max, permits => $permits);
	return $self->call('try_acquire',
		'dlock.try_acquire($1, $2, max_permits => $3::int, permits => $4::int, lease => $5::interval)',
		[ $s, $h, $max, $permits, lease_arg($lease) ], %f)
	  if rnd(2);
	my $wait = pick(0, 20, 100, 300);
	return $self->call('acquire',
		'dlock.acquire($1, $2, max_permits => $3::int, permits => $4::int, '
		  . 'lease => $5::interval, wait => $6::interval)',
		[ $s, $h, $max, $permits, lease_arg($lease), lease_arg($wait) ], %f, wait => $wait);
}

# multi_op: try_lock_all or lock_all of two or three lock resources in a
# random order (0.5).  After a NULL result, on a private holder text, the
# holdings of it on those resources are read (after: [resource, fence]):
# each must be one this client was handed before (all or nothing).
sub multi_op
{
	my ($self, $h, $lease, $sh) = @_;
	my @all = @{ $self->{resources} };
	my @rs;
	push @rs, splice(@all, rnd(scalar @all), 1) for 1 .. (@all > 2 && rnd(2) ? 3 : 2);
	my %f = (rs => \@rs, h => $h, lease => $lease, $sh ? (sh => 1) : ());
	my $rec;
	if (rnd(2))
	{
		$rec = $self->call('try_lock_all',
			'dlock.try_lock_all($1::text[], $2, $3::interval, shared => $4::boolean)',
			[ \@rs, $h, lease_arg($lease), $sh ? 1 : 0 ], %f);
	}
	else
	{
		my $wait = pick(0, 20, 100, 300);
		$rec = $self->call('lock_all',
			'dlock.lock_all($1::text[], $2, $3::interval, shared => $4::boolean, wait => $5::interval)',
			[ \@rs, $h, lease_arg($lease), $sh ? 1 : 0, lease_arg($wait) ], %f, wait => $wait);
	}
	if (!$rec->{err} && !defined $rec->{res} && $h =~ m{/c\Q$self->{id}\E/})
	{
		my $rows = $self->{dbh}->selectall_arrayref(
			q{SELECT resource, fence FROM dlock.locks
			   WHERE holder = $1 AND pg_get_userbyid(owner::oid) = current_user AND resource = ANY ($2::text[])
			   ORDER BY resource, fence}, undef, $h, \@rs);
		if ($rows) { $rec->{after} = $rows }
		else
		{
			# The read failed (and aborted the transaction): so did the op.
			$rec->{err} = $self->{dbh}->state || 'XXXXX';
			$rec->{msg} = $self->{dbh}->errstr;
		}
	}
	return $rec;
}

# steal: unlock or renew a holding of another role, under the holder text
# read from dlock.locks.  A role other than the owner must get 42501 or
# NULL (superusers aside: the superuser only renews, so counts stay the
# owners').  Only on this run's own resources: a run that shares the
# database with another (another tag) must not renew the other's
# holdings, which the other's checker cannot see (a superuser's renew of
# another run's holding made that run's checker report a revival).
sub steal
{
	my ($self) = @_;
	my $rows = $self->{dbh}->selectall_arrayref(
		q{SELECT resource, holder, fence FROM dlock.locks
		   WHERE pg_get_userbyid(owner::oid) <> current_user AND NOT expired
		     AND holder NOT LIKE 'shared/%' AND holder NOT LIKE 'probe/%'
		     AND holder NOT LIKE 'sess/%'
		     AND resource = ANY ($1::text[])
		   ORDER BY resource, holder}, undef,
		[ @{ $self->{resources} }, $self->{kinds} && $self->{kinds}{sem} ? @{ $self->{sems} } : () ]);
	if (my $bad = $self->read_failed) { return $bad }
	return undef unless $rows && @$rows;
	my ($r, $h, $f) = @{ pick(@$rows) };
	if (!$self->{is_super} && rnd(2))
	{
		return $self->call('unlock', 'dlock.unlock($1, $2, $3::int8)',
			[ $r, $h, rnd(2) ? $f : undef ], r => $r, h => $h,
			f => undef, steal => 1);
	}
	return $self->call('renew',
		"(extract(epoch FROM dlock.renew(\$1, \$2, '1 second'::interval, \$3::int8)) * 1000000)::int8",
		[ $r, $h, $f ], r => $r, h => $h, lease => 1000, f => $f, steal => 1);
}

# finish: log the unit's records with their fate and end times.
sub finish
{
	my ($self, $recs, $fate, $tlo) = @_;
	my $tdone = now_us($self->{dbh});
	for my $rec (@$recs)
	{
		$rec->{fate} = $rec->{undone} ? 'rollback' : $fate;
		# A session whose open_session rolled back never was.
		if ($rec->{k} eq 'open_session' && $rec->{fate} ne 'commit' && defined $rec->{sess})
		{
			$_->{dead} = 1 for grep { $_->{id} == $rec->{sess} } @{ $self->{sessions} };
		}
		$rec->{ufate} = $fate;
		$rec->{tdone} = $tdone;
		$rec->{tlo} = $tlo // $rec->{t1};
		print { $self->{log} } $JSON->encode($rec), "\n";
	}
}

# auto_unit: one operation in autocommit.
sub auto_unit
{
	my ($self) = @_;
	my $rec = $self->random_op(0) or return;
	$rec->{xact} = 0;
	$self->finish([$rec], 'commit', $rec->{t1});
}

# xact_unit: a transaction of a few operations, maybe a savepoint and a
# ROLLBACK TO, ending in COMMIT or ROLLBACK.
sub xact_unit
{
	my ($self) = @_;
	my $dbh = $self->{dbh};
	my $iso = rnd(2) ? 'SERIALIZABLE' : 'READ COMMITTED';
	$dbh->do("BEGIN ISOLATION LEVEL $iso") or die $dbh->errstr;
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

# reap_unit: reap() in a transaction left open a while (issue 8, defect 7:
# it must not block acquirers of expired leases).
sub reap_unit
{
	my ($self) = @_;
	my $dbh = $self->{dbh};
	if ($self->{portable})
	{
		my $rec = $self->call('reap', 'dlock.reap()', []);
		$rec->{xact} = 0;
		$self->finish([$rec], $rec->{err} ? 'rollback' : 'commit', $rec->{t1});
		return;
	}
	$dbh->do('BEGIN') or die $dbh->errstr;
	my $rec = $self->call('reap', 'dlock.reap()', []);
	$rec->{xact} = 1;
	$rec->{open} = 1;
	$dbh->do('SELECT pg_sleep($1 / 1000.0)', undef, pick(100, 200, 300, 400))
	  unless $rec->{err};
	my $tlo = $rec->{err} ? undef : now_us($dbh);
	my $ok = !$rec->{err} && $dbh->do('COMMIT');
	$dbh->do('ROLLBACK') unless $ok;
	$self->finish([$rec], $ok ? 'commit' : 'rollback', $tlo);
}

# probe_take(r, lease): the prober's acquisition of R, not logged yet:
# (its record, its holder text, the moment past which R must be free, or
# undef for a leased one: its t1 + lease + 5 s).  With sessions, one
# round in three in a session of its own opened for LEASE (logged here);
# () when that session did not open.  ChaosDriver's prober uses it too.
sub probe_take
{
	my ($self, $r, $lease) = @_;
	my $h = "probe/h" . ($self->{unit} % 2);
	my $kinds = $self->{kinds} //= $self->detect_kinds;
	if (!$kinds->{sess} || rnd(3) != 0)
	{
		return ($self->call('try_lock', 'dlock.try_lock($1, $2, $3::interval)',
				[ $r, $h, lease_arg($lease) ], r => $r, h => $h, lease => $lease, probe => 1),
			$h, undef);
	}
	$h = "sess/$self->{role}/c$self->{id}/s" . $self->{seq} . ($self->{tag} ne '' ? "\@$self->{tag}" : '');
	my $o = $self->call('open_session', 'dlock.open_session($1::interval, $2)',
		[ lease_arg($lease), $h ], h => $h, ttl => $lease, probe => 1);
	$o->{sess} = $o->{res} if !$o->{err} && defined $o->{res};
	$self->probe_log($o);
	return () if $o->{err} || !defined $o->{res};
	# the session's expiry: the server's clock during open_session + ttl
	return ($self->call('try_lock', 'dlock.try_lock($1, $2, session => $3::int8)',
			[ $r, $h, $o->{res} ], r => $r, h => $h, sess => $o->{res}, probe => 1),
		$h, $o->{t1} + $lease * 1000 + 5000);
}

# probe_log(rec): log one call of the prober (autocommit).
sub probe_log
{
	my ($self, $rec) = @_;
	$rec->{xact} = 0;
	$self->finish([$rec], 'commit', $rec->{t1});
}

# probe_unit: the prober's round on its own resource: take it with a short
# lease, sometimes release it, else let it run out; then, once the server
# clock is past the end of the lease, take it again under another holder
# text: it must be free at once (no other client ever acquires it).  With
# sessions, one round in three takes it first in a session of its own,
# opened for the lease and never kept alive, so that every run has a
# holding ended by its session's end and taken over after (the checker's
# session mutations need one; the random workload had none once).
sub probe_unit
{
	my ($self) = @_;
	my $dbh = $self->{dbh};
	my $r = $self->{probe};
	my $lease = pick(50, 100, 200);
	my ($rec, $h, $until) = $self->probe_take($r, $lease);
	return unless $rec;
	$self->probe_log($rec);
	return if $rec->{err} || !defined $rec->{res};
	$until //= $rec->{t1} + $lease * 1000 + 5000;
	if (rnd(4) == 0)
	{
		$self->{unit}++;
		my $u = $self->call('unlock', 'dlock.unlock($1, $2, $3::int8)',
			[ $r, $h, $rec->{res} ], r => $r, h => $h, f => $rec->{res}, probe => 1,
			defined $rec->{sess} ? (sess => $rec->{sess}) : ());
		$self->probe_log($u);
	}
	while ((my $now = now_us($dbh)) < $until)
	{
		usleep(List::Util::min(($until - $now), 50_000));
	}
	$self->{unit}++;
	my $h2 = "probe/h" . ($self->{unit} % 2);
	my $p = $self->call('try_lock', 'dlock.try_lock($1, $2, $3::interval)',
		[ $r, $h2, lease_arg($lease) ], r => $r, h => $h2, lease => $lease,
		probe => 1, expect_free => 1);
	$self->probe_log($p);
	if (!$p->{err} && defined $p->{res})
	{
		$self->{unit}++;
		my $u = $self->call('unlock', 'dlock.unlock($1, $2, $3::int8)',
			[ $r, $h2, $p->{res} ], r => $r, h => $h2, f => $p->{res}, probe => 1);
		$self->probe_log($u);
	}
}

# run: the client's main loop (in its own process).
sub run
{
	my ($self) = @_;
	srand($self->{seed});
	open($self->{log}, '>', $self->{logfile}) or die "$self->{logfile}: $!\n";
	$self->{log}->autoflush(1);
	$self->{dbh} = connect_as($self->{conninfo}, $self->{login});
	my $end = time + $self->{seconds};
	while (time < $end || $self->owes_calls($end + 3 * $self->{seconds}))
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

# owes_calls: whether a client past its time goes on, until cap: the
# tests count some kinds of call (095_model.pl, portable 070_model.t), and
# on a loaded machine a run of fixed time made too few of them (CI: 5
# calls under an old fence refused, where an idle machine makes 14).  So
# each client makes at least $MIN_CALLS calls, $MIN_OLD of them under an
# old fence and refused, or runs for four times its time (twice was too
# little once: 5 refused on CI).
our ($MIN_CALLS, $MIN_OLD) = (150, 2);
sub owes_calls
{
	my ($self, $cap) = @_;
	return 0 if $self->{probe} || time >= $cap;
	return ($self->{calls} // 0) < $MIN_CALLS || ($self->{old_refused} // 0) < $MIN_OLD;
}

use List::Util ();

1;
