# 015_python_import.t: `import dlock` in Python started in the project's
# root gets the Python client, not the extension's dlock.so that make
# leaves there (that failed: ImportError, undefined symbol).  The client
# is on PYTHONPATH, which Python searches after the current directory, as
# it does site-packages.  Checked in the tree itself once make has built
# dlock.so, and always in a scratch copy of the root whose dlock.so is
# not a Python module either.  No server needed.
# Promises: none
use strict;
use warnings;
use Cwd qw(abs_path);
use File::Basename qw(dirname);
use File::Copy qw(copy);
use File::Path qw(make_path);
use File::Temp qw(tempdir);
use Test::More;

my $top = abs_path(dirname(__FILE__) . '/../../..');
my $client = "$top/clients/python/src";
my $probe = `python3 -c 'import psycopg' 2>&1`;
plan skip_all => "python3 with psycopg 3 missing: $probe" if $?;

# py DIR, PYTHONPATH, CODE: what python3 -c CODE prints, run in DIR.
sub py
{
	my ($dir, $path, $code) = @_;
	local $ENV{PYTHONPATH} = $path;
	local $ENV{PYTHONDONTWRITEBYTECODE} = 1;
	delete $ENV{PYTHONPATH} unless defined $path;
	my $out = `cd '$dir' && python3 -c '$code' 2>&1`;
	return ($? >> 8, $out);
}

my $code = 'import dlock, dlock.aio; print(dlock.__file__); print(dlock.__version__); print(dlock.aio.__name__)';
my ($v) = `cat '$client/dlock/__init__.py'` =~ /^__version__ = "([^"]+)"/m;

# check DIR, LABEL: the client imported in DIR, through every path.
sub check
{
	my ($dir, $label) = @_;
	my ($rc, $out) = py($dir, $client, $code);
	is($rc, 0, "$label: import dlock, dlock.aio exits 0") or diag($out);
	like($out, qr{^\Q$client\E/dlock/__init__\.py\n\Q$v\E\ndlock\.aio$}, "$label: ... and is the client");
	($rc, $out) = py($dir, undef, 'import dlock');
	isnt($rc, 0, "$label: with no client on the path, import dlock fails");
	like($out, qr/ImportError: the dlock Python client is not installed/, "$label: ... saying so");
}

SKIP:
{
	skip('no dlock.so in the tree (make builds it)', 4) unless -f "$top/dlock.so";
	check($top, 'in the tree after make');
}

# A scratch root: the root's Python files and a dlock.so that is not a
# Python module.
my $root = tempdir(CLEANUP => 1);
if (-d "$top/dlock")
{
	make_path("$root/dlock");
	copy($_, "$root/dlock/") or die "copy $_: $!" for glob("$top/dlock/*.py");
}
open(my $so, '>', "$root/dlock.so") or die "$root/dlock.so: $!";
print $so "not a Python module\n";
close($so);
check($root, 'in a copy of the root');

done_testing;
