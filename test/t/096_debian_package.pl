# 096_debian_package.pl: the Debian packages (debian/, pg_buildext).  On a
# copy of the tree, dpkg-buildpackage -us -uc -b builds postgresql-NN-dlock
# (NN: the PostgreSQL major under test; debian/pgversions says 15+)
# and dlock-cli; their version is dlock.control's; the extension package
# holds the library and every install and upgrade script, the CLI package
# the dlock binary and its man page.  Both are extracted (dpkg-deb -x, never
# installed into the system) over a private copy of this PostgreSQL from
# which every dlock file was removed, and the pg_regress suite runs against
# that copy: the library and scripts under test are the packaged ones.  The
# packaged CLI runs (dlock --version).
# Promises: none

use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use File::Basename qw(basename);

use JSON::PP;

# The major under test (pg_config's), as pg_buildext picks it on this release.
my ($major) = `pg_config --version` =~ /PostgreSQL (\d+)/;
ok($major, "PostgreSQL major under test: $major");

open(my $ctl, '<', 'dlock.control') or die "dlock.control: $!";
my ($version) = map { /^default_version = '(.*)'/ ? $1 : () } <$ctl>;
close $ctl;
ok($version, "dlock.control's default_version: $version");

# META.json (PGXN) carries the same version, as semver (0.2 is 0.2.0).
my $meta = decode_json(slurp_file('META.json'));
my $semver = join('.', (split(/\./, $version), 0, 0)[0 .. 2]);
is($meta->{version}, $semver, "META.json's version is $semver");
is($meta->{provides}{dlock}{version}, $semver, "META.json's provides.dlock.version is $semver");
ok(-f $meta->{provides}{dlock}{file}, "META.json's provides.dlock.file exists");

if (system('command -v dpkg-buildpackage >/dev/null 2>&1') != 0)
{
	diag('dpkg-buildpackage not found (Debian only; test/run-tests.sh installs it): packages not tested');
	done_testing();
	exit 0;
}

my $tmp = PostgreSQL::Test::Utils::tempdir('deb');
my $src = "$tmp/dlock";

# run LOG, CMD...: run CMD with a clean make environment (this test runs
# under make), output to LOG; on failure, show the end of LOG.
sub run_logged
{
	my ($log, @cmd) = @_;
	local %ENV = %ENV;
	delete @ENV{qw(MAKEFLAGS MAKELEVEL MFLAGS MAKEOVERRIDES)};
	my $ok = IPC::Run::run(\@cmd, '>', $log, '2>&1');
	if (!$ok)
	{
		my $out = slurp_file($log);
		my @lines = split /\n/, $out;
		splice(@lines, 0, @lines - 60) if @lines > 60;
		diag("@cmd failed; end of $log:\n" . join("\n", @lines));
	}
	return $ok;
}

# The tree as it is checked out: no build products, not this test's tmp_check.
ok(run_logged("$tmp/rsync.log", 'rsync', '-a', '--exclude=.git', '--exclude=tmp_check',
		'--exclude=tmp_check_iso', '--exclude=output_iso', '--exclude=results', '--exclude=log',
		'--exclude=*.o', '--exclude=*.so', '--exclude=*.bc', '--exclude=cli/dlock', './', "$src/"),
	'copied the tree');

my $t0 = time;
ok(run_logged("$tmp/build.log", 'sh', '-c', "cd '$src' && dpkg-buildpackage -us -uc -b"),
	'dpkg-buildpackage -us -uc -b builds');
note('dpkg-buildpackage took ' . (time - $t0) . ' s');
my $build_log = slurp_file("$tmp/build.log");
unlike($build_log, qr/^.*\.[ch]:\d+(:\d+)?: warning:.*$/m, 'the build is free of compiler warnings');
unlike($build_log, qr/^.*warning: email address.*$/m, "dpkg accepts the maintainer's address");

my ($changelog_version) = `cd '$src' && dpkg-parsechangelog -S Version`;
chomp $changelog_version;
like($changelog_version, qr/^\Q$version\E-\d+$/, "debian/changelog's version ($changelog_version) is dlock.control's");

my ($ext_deb) = glob("$tmp/postgresql-${major}-dlock_${changelog_version}_*.deb");
my ($cli_deb) = glob("$tmp/dlock-cli_${changelog_version}_*.deb");
ok($ext_deb && -f $ext_deb, "postgresql-${major}-dlock built: " . basename($ext_deb // '(none)'));
ok($cli_deb && -f $cli_deb, 'dlock-cli built: ' . basename($cli_deb // '(none)'));
BAIL_OUT('no packages') unless $ext_deb && $cli_deb;

# What each package holds.
my @ext = map { s{^\./}{}r } grep { !m{/$} } map { (split ' ', $_)[5] } split /\n/, `dpkg-deb -c '$ext_deb'`;
my @cli = map { s{^\./}{}r } grep { !m{/$} } map { (split ' ', $_)[5] } split /\n/, `dpkg-deb -c '$cli_deb'`;
my @scripts = sort map { basename($_) } glob('sql/dlock--*.sql');
is_deeply([ sort map { basename($_) } grep { m{^usr/share/postgresql/$major/extension/dlock--} } @ext ],
	\@scripts, 'the extension package holds every install and upgrade script: ' . join(' ', @scripts));
ok((grep { $_ eq "usr/share/postgresql/$major/extension/dlock.control" } @ext), 'and dlock.control');
ok((grep { $_ eq "usr/lib/postgresql/$major/lib/dlock.so" } @ext), 'and dlock.so');
ok(!(grep { m{^usr/(local/)?bin/} } @ext), 'and no CLI');
ok((grep { $_ eq 'usr/bin/dlock' } @cli), 'the CLI package holds usr/bin/dlock');
ok((grep { m{^usr/share/man/man1/dlock\.1} } @cli), 'and its man page');
like(`dpkg-deb -f '$ext_deb' Depends`, qr/\bpostgresql-$major\b/, "the extension depends on postgresql-$major");
like(`dpkg-deb -f '$cli_deb' Depends`, qr/\blibpq5\b/, 'the CLI depends on libpq5');
like(`dpkg-deb -f '$cli_deb' Depends`, qr/\blibmariadb3\b/, 'and on libmariadb3 (its MySQL and MariaDB support is always built)');

# A private PostgreSQL: this one's files (bin, lib, share), without dlock,
# and the packages' files over them.
my $bindir = `pg_config --bindir`;
my $sharedir = `pg_config --sharedir`;
chomp($bindir, $sharedir);
my ($prefix) = $bindir =~ m{^(.*)/lib/postgresql/$major/bin$};
ok(defined $prefix && $sharedir eq "$prefix/share/postgresql/$major",
	"this PostgreSQL has Debian's layout ($bindir, $sharedir)");
my $root = "$tmp/root";
ok(run_logged("$tmp/copy.log", 'sh', '-c',
		"mkdir -p '$root/usr/lib/postgresql' '$root/usr/share/postgresql'"
		  . " && cp -a '$prefix/lib/postgresql/$major' '$root/usr/lib/postgresql/'"
		  . " && cp -a '$prefix/share/postgresql/$major' '$root/usr/share/postgresql/'"
		  . " && rm -rf '$root'/usr/lib/postgresql/$major/lib/dlock.so '$root'/usr/lib/postgresql/$major/lib/bitcode/dlock*"
		  . " '$root'/usr/share/postgresql/$major/extension/dlock*"),
	'a private copy of this PostgreSQL without dlock');
ok(run_logged("$tmp/extract.log", 'sh', '-c', "dpkg-deb -x '$ext_deb' '$root' && dpkg-deb -x '$cli_deb' '$root'"),
	'extracted both packages over it');
my $pg_config = "$root/usr/lib/postgresql/$major/bin/pg_config";
is(`'$pg_config' --pkglibdir`, "$root/usr/lib/postgresql/$major/lib\n", "the copy's \$libdir is its own");
is(`'$pg_config' --sharedir`, "$root/usr/share/postgresql/$major\n", 'and so is its share directory');

# The regression suite against the packaged library and scripts.
my $ok = run_logged("$tmp/regress.log", 'sh', '-c',
	"cd '$src' && PATH='$root/usr/lib/postgresql/$major/bin':\$PATH make -s installcheck-regress PG_CONFIG='$pg_config'");
my $regress = slurp_file("$tmp/regress.log");
ok($ok, 'the pg_regress suite passes against the packaged files');
like($regress, qr/All \d+ tests passed/, 'pg_regress: ' . (($regress =~ /(All \d+ tests passed|\d+ of \d+ tests failed)/)[0] // '?'));
diag(slurp_file("$src/regression.diffs")) if !$ok && -f "$src/regression.diffs";

# The packaged CLI runs.
my ($out, $err);
IPC::Run::run([ "$root/usr/bin/dlock", '--version' ], '>', \$out, '2>', \$err);
like($out, qr/\b\Q$version\E\b/, "the packaged dlock --version says $version: " . ($out // '') =~ s/\n.*//sr);
is($?, 0, 'dlock --version exits 0');

done_testing();
