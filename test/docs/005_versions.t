# 005_versions.t: one version everywhere.  default_version in dlock.control
# is the source; META.json, the portable and MariaDB scripts, the Python and
# Node packages and debian/changelog must say the same (0.5 is 0.5.0 where
# a registry wants three numbers), and the CLI's Makefile must read it
# (and a built cli/dlock print it).
# Then tools/set-version, run on a copy with another version, must leave a
# copy that passes the same checks: a bump is one line plus the script.
# No server needed:  prove test/docs/005_versions.t
# Promises: none
use strict;
use warnings;
use Cwd qw(abs_path);
use File::Basename qw(dirname);
use File::Path qw(make_path);
use File::Temp qw(tempdir);
use JSON::PP;
use Test::More;

my $top = abs_path(dirname(__FILE__) . '/../..');

sub slurp { my ($f) = @_; open(my $h, '<', $f) or die "$f: $!\n"; local $/; <$h> }

# check ROOT, LABEL: the checks on the tree at ROOT; returns its version.
sub check
{
	my ($root, $label) = @_;
	my ($v) = slurp("$root/dlock.control") =~ /^default_version = '([^']+)'$/m;
	ok(defined $v && $v =~ /^\d+(\.\d+){1,2}$/, "$label: dlock.control has a default_version")
	  or return undef;
	my $semver = join('.', (split(/\./, $v), 0, 0)[0 .. 2]);

	my $meta = decode_json(slurp("$root/META.json"));
	is($meta->{version}, $semver, "$label: META.json version");
	is($meta->{provides}{dlock}{version}, $semver, "$label: META.json provides.dlock.version");

	like(slurp("$root/Makefile"), qr/^EXTVERSION = .*dlock\.control/m,
		"$label: Makefile: EXTVERSION from dlock.control");
	my $cli = slurp("$root/cli/Makefile");
	ok($cli =~ m{^CONTROL\s*:=\s*\.\./dlock\.control$}m && $cli =~ /^DLOCK_VERSION\s*:=.*default_version.*\$\(CONTROL\)/m,
		"$label: cli/Makefile: the CLI's version from dlock.control");

	my $portable = slurp("$root/portable/dlock.sql");
	my @p = $portable =~ /^INSERT INTO dlock\.portable \(version, installed_at\) VALUES \('([^']*)'/mg;
	push @p, $portable =~ /^UPDATE dlock\.portable p SET version = '([^']*)' WHERE p\.version OPERATOR\(pg_catalog\.<>\) '([^']*)';$/mg;
	is(join(' ', @p), "$v $v $v", "$label: portable/dlock.sql: its version row");

	my $my = slurp("$root/mysql/dlock.sql");
	my ($mh) = $my =~ m{^ \* mysql/dlock\.sql: dlock (\S+) for MariaDB}m;
	my ($mf) = $my =~ /FUNCTION dlock\.version\(\) RETURNS VARCHAR\(16\)\n.*\n    RETURN '([^']*)'/;
	is($mh // 'none', $v, "$label: mysql/dlock.sql: header");
	is($mf // 'none', $v, "$label: mysql/dlock.sql: dlock.version()");

	my ($py) = slurp("$root/clients/python/pyproject.toml") =~ /^version = "([^"]*)"$/m;
	is($py // 'none', $semver, "$label: clients/python/pyproject.toml");
	my ($pyv) = slurp("$root/clients/python/src/dlock/__init__.py") =~ /^__version__ = "([^"]*)"$/m;
	is($pyv // 'none', $semver, "$label: clients/python/src/dlock/__init__.py __version__");
	is(decode_json(slurp("$root/clients/node/package.json"))->{version}, $semver,
		"$label: clients/node/package.json");
	my ($java) = slurp("$root/clients/java/pom.xml") =~ m{^  <artifactId>dlock</artifactId>\n  <version>([^<]*)</version>$}m;
	is($java // 'none', $semver, "$label: clients/java/pom.xml");

	my ($deb) = slurp("$root/debian/changelog") =~ /\Adlock \(([^)]+)\)/;
	like($deb // 'none', qr/^\Q$v\E-\d+$/, "$label: debian/changelog's top entry");
	return $v;
}

my $v = check($top, 'tree');
SKIP:
{
	skip('the CLI is not built (cli/dlock)', 1) unless -x "$top/cli/dlock";
	my $out = `$top/cli/dlock -d 'host=/nonexistent port=1' --version 2>/dev/null`;
	like($out, qr/^dlock \Q$v\E$/m, 'the built CLI: dlock --version');
}

# The bump: a copy of the files, tools/set-version with another version.
my $tmp = tempdir(CLEANUP => 1);
for my $f (qw(dlock.control META.json Makefile cli/Makefile portable/dlock.sql mysql/dlock.sql
	clients/python/pyproject.toml clients/python/src/dlock/__init__.py
	clients/node/package.json clients/java/pom.xml debian/changelog))
{
	make_path(dirname("$tmp/$f"));
	open(my $h, '>', "$tmp/$f") or die "$tmp/$f: $!";
	print $h slurp("$top/$f");
	close($h);
}
my $out = `perl $top/tools/set-version --root $tmp 98.7 2>&1`;
is($?, 0, 'tools/set-version --root COPY 98.7 exits 0') or diag($out);
is(check($tmp, 'after set-version 98.7'), '98.7', 'the copy is at 98.7');
like(slurp("$tmp/debian/changelog"), qr/\Adlock \(98\.7-1\) unstable; urgency=medium\n\n  \* 98\.7: /,
	'debian/changelog: a new top entry');
$out = `perl $top/tools/set-version --root $tmp 2>&1`;
is("$?:$out", '0:', 'tools/set-version again changes nothing');

done_testing;
