# 006_dist.t: make dist builds the PGXN archive.  It unpacks the zip and
# checks: one top directory dlock-VERSION/, the files a build needs are
# there (and .ci is not), META.json follows the PGXN Meta Spec 1.0.0 (its
# required keys, SemVer versions, licence, terms, tags, prereqs) and its
# version is default_version of the archived dlock.control.
# In a tree without .git (run-tests.sh's copy) it archives the tree's files
# through a scratch git directory.  No server needed.
# Promises: none
use strict;
use warnings;
use Cwd qw(abs_path);
use File::Basename qw(dirname);
use File::Temp qw(tempdir);
use IO::Uncompress::Unzip qw($UnzipError);
use JSON::PP;
use Test::More;

my $top = abs_path(dirname(__FILE__) . '/../..');
my $tmp = tempdir(CLEANUP => 1);
plan skip_all => 'git or make missing' if system('git --version >/dev/null 2>&1 && make --version >/dev/null 2>&1');
my $pgc = $ENV{PG_CONFIG} // 'pg_config';
plan skip_all => "$pgc missing (the Makefile includes PGXS)" if system("$pgc --pgxs >/dev/null 2>&1");

# A tree without its own .git: a scratch repository of its files, the
# ones .gitignore does not ignore, committed.
my $toplevel = `git -C $top rev-parse --show-toplevel 2>/dev/null`;
chomp $toplevel;
local $ENV{GIT_CONFIG_NOSYSTEM} = 1;
if (!$toplevel || abs_path($toplevel) ne $top)
{
	$ENV{GIT_DIR} = "$tmp/scratch.git";
	$ENV{GIT_WORK_TREE} = $top;
	system("git init -q && git add -A && git -c user.name=t -c user.email=t\@t commit -qm t") == 0
	  or BAIL_OUT('a scratch repository of the tree could not be made');
}

my ($v) = do { local (@ARGV, $/) = "$top/dlock.control"; <> } =~ /^default_version = '([^']+)'$/m;
my $semver = join('.', (split(/\./, $v), 0, 0)[0 .. 2]);
like(`make -s -n -C $top dist PG_CONFIG=$pgc`, qr/-o dlock-\Q$semver\E\.zip HEAD/,
	"make dist writes dlock-$semver.zip by default");
my $zip = "$tmp/dist.zip";
my $out = `make -s -C $top dist PG_CONFIG=$pgc DIST_ZIP=$zip 2>&1`;
is($?, 0, 'make dist exits 0') or diag($out);

# The archive's members: names, and the text of the small files we read.
my (%member, $status);
my $u = IO::Uncompress::Unzip->new($zip) or BAIL_OUT("unzip $zip: $UnzipError");
for ($status = 1; $status > 0; $status = $u->nextStream)
{
	my $name = $u->getHeaderInfo()->{Name};
	my ($buf, $data) = ('', '');
	while (($status = $u->read($buf)) > 0) { $data .= $buf; }
	last if $status < 0;
	$member{$name} = $data;
}
is($status, 0, 'the zip reads to its end');

my %tops = map { m{^([^/]+)/} ? ($1 => 1) : ($_ => 1) } keys %member;
my @tops = sort keys %tops;
is(scalar(@tops), 1, 'one top directory') or diag("@tops[0 .. ($#tops > 4 ? 4 : $#tops)]");
my $dir = $tops[0];
is($dir, "dlock-$semver", "it is dlock-$semver (default_version of dlock.control)");
my @sql = map { s{^\Q$top\E/}{}r } glob("$top/sql/dlock--*.sql");
for my $f (qw(META.json dlock.control Makefile README.md LICENSE CHANGELOG.md src/dlock.c
	cli/Makefile portable/dlock.sql mysql/dlock.sql), @sql)
{
	ok(exists $member{"$dir/$f"}, "$dir/$f is there");
}
ok(!grep({ m{^\Q$dir\E/\.ci/} } keys %member), '.ci is left out');

# META.json by the PGXN Meta Spec 1.0.0 (https://pgxn.org/meta/spec.txt).
my $meta = eval { decode_json($member{"$dir/META.json"} // '') };
ok($meta, 'META.json is JSON') or BAIL_OUT($@);
my ($cv) = ($member{"$dir/dlock.control"} // '') =~ /^default_version = '([^']+)'$/m;
is($meta->{version}, join('.', (split(/\./, $cv // ''), 0, 0)[0 .. 2]),
	"META.json's version is the archived dlock.control's default_version ($semver)");
my $semver_re = qr/(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?/;
my @missing = grep { !exists $meta->{$_} } qw(name version abstract maintainer license provides meta-spec);
is("@missing", '', 'the required keys are there');
my %known = map { $_ => 1 } qw(name version abstract maintainer license provides meta-spec description
	generated_by tags no_index prereqs release_status resources);
my @unknown = grep { !$known{$_} && !/^[xX]_./ } keys %$meta;
is("@unknown", '', 'no key outside the spec (custom keys begin x_)');
like($meta->{name}, qr{^[^/\\\s[:cntrl:]]{2,}$}, 'name is a term');
like($meta->{version}, qr/^$semver_re$/, 'version is SemVer');
is($meta->{'meta-spec'}{version}, '1.0.0', 'meta-spec 1.0.0');
like($meta->{abstract}, qr/./, 'abstract is not empty');
ok(!ref($meta->{maintainer}) || (ref($meta->{maintainer}) eq 'ARRAY' && @{ $meta->{maintainer} }),
	'maintainer is a string or a list');
my %licences = map { $_ => 1 } qw(agpl_3 apache_1_1 apache_2_0 artistic_1 artistic_2 bsd freebsd
	gfdl_1_2 gfdl_1_3 gpl_1 gpl_2 gpl_3 lgpl_2_1 lgpl_3_0 mit mozilla_1_0 mozilla_1_1 openssl perl_5
	postgresql qpl_1_0 ssleay sun zlib open_source restricted unrestricted unknown);
ok($licences{ $meta->{license} }, "license $meta->{license} is one the spec names");
ok(ref($meta->{provides}) eq 'HASH' && %{ $meta->{provides} }, 'provides names extensions');
for my $ext (sort keys %{ $meta->{provides} })
{
	my $p = $meta->{provides}{$ext};
	like($p->{version} // '', qr/^$semver_re$/, "provides.$ext.version is SemVer");
	ok(exists $member{"$dir/$p->{file}"}, "provides.$ext.file ($p->{file}) is in the archive");
	ok(!defined $p->{docfile} || exists $member{"$dir/$p->{docfile}"}, "provides.$ext.docfile is in the archive");
	my @bad = grep { !/^(file|version|abstract|docfile|[xX]_.+)$/ } keys %$p;
	is("@bad", '', "provides.$ext has only the spec's keys");
}
ok(!defined $meta->{release_status} || $meta->{release_status} =~ /^(stable|testing|unstable)$/,
	'release_status is stable, testing or unstable');
my @badtags = grep { !m{^[^/\\[:cntrl:]]{2,255}$} } @{ $meta->{tags} // [] };
is("@badtags", '', 'tags: 2 to 255 characters, no slash, backslash or control character');
my $range = qr/(([=!]=|[<>]=?)\s*)?($semver_re|0)/;
my @badreq;
for my $phase (sort keys %{ $meta->{prereqs} // {} })
{
	push(@badreq, $phase), next unless $phase =~ /^(configure|build|test|runtime|develop|[xX]_.+)$/;
	for my $rel (sort keys %{ $meta->{prereqs}{$phase} })
	{
		push(@badreq, "$phase.$rel"), next unless $rel =~ /^(requires|recommends|suggests|conflicts|[xX]_.+)$/;
		while (my ($name, $r) = each %{ $meta->{prereqs}{$phase}{$rel} })
		{
			push @badreq, "$phase.$rel.$name" unless $r =~ /^$range(,\s*$range)*$/;
		}
	}
}
is("@badreq", '', 'prereqs: phases, relationships and version ranges as the spec says');
is($meta->{prereqs}{runtime}{requires}{PostgreSQL}, '15.0.0', 'runtime needs PostgreSQL 15 or later');

done_testing;
