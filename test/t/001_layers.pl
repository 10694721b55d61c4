# 001_layers.pl: the files of src/ call each other one way only.
#
# A file "calls" another when it names a dlock_* function defined there
# (definitions start at the beginning of a line, PostgreSQL style).  The
# call graph between files must have no cycle: src/dlock.h lists the
# layers, and a lower file never calls back up (what must happen when a
# transaction ends is registered with xact.c as hooks instead).  Needs no
# server.
# Promises: none

use strict;
use warnings;

use FindBin;
use Test::More;

my $src = "$FindBin::RealBin/../../src";
my (%text, %defined_in);
for my $path (glob("$src/*.c"))
{
	my ($file) = $path =~ m{([^/]+)$};
	open(my $fh, '<', $path) or die "$path: $!";
	local $/;
	my $t = <$fh>;
	close($fh);
	$t =~ s{/\*.*?\*/}{}gs;				# comments
	$t =~ s{"(?:\\.|[^"\\])*"}{""}g;	# strings
	$text{$file} = $t;
	$defined_in{$1} = $file while $t =~ /^(dlock_\w+)\s*\([^;]*?\)\s*\{/mg;
}
cmp_ok(scalar(keys %defined_in), '>', 50, 'functions found in src/*.c');

my %calls;
for my $file (keys %text)
{
	for my $fn (keys %defined_in)
	{
		next if $defined_in{$fn} eq $file;
		$calls{$file}{ $defined_in{$fn} } = 1 if $text{$file} =~ /\b\Q$fn\E\b/;
	}
}

# A cycle: a file that reaches itself.
my @cycles;
for my $start (sort keys %text)
{
	my %seen;
	my @todo = keys %{ $calls{$start} || {} };
	while (@todo)
	{
		my $f = shift @todo;
		next if $seen{$f}++;
		push @todo, keys %{ $calls{$f} || {} };
	}
	push @cycles, $start if $seen{$start};
}
is(join(' ', @cycles), '', 'no file of src/ calls back into itself through others');

# The bottom layer calls nobody.
is(join(' ', sort keys %{ $calls{'xact.c'} || {} }), '', 'xact.c calls no other file');

done_testing();
