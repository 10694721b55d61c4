#!/usr/bin/perl
# run-model.pl: run dlock's randomized, model-checked workload (Model.pm)
# against a running server and print its verdict.  Exits 0 if the checker
# found no violation, 1 if it did, 2 on usage errors.
#
#   test/model/run-model.pl --conninfo 'host=/tmp dbname=postgres' \
#       [--seed N] [--clients 6] [--seconds 10] [--resources 3] [--dir DIR]
#       [--tag T] [--portable]
#   test/model/run-model.pl --check DIR
#
# The tag (default: m and this process's id) begins the run's resources and
# ends its holder texts, so runs with different tags may share a database.
# The run's logs (its recorded history) stay in DIR; --check DIR checks such
# a history again, offline, without a server.
# The conninfo's user must be a superuser (it creates the extension if
# needed and two login roles, dlock_model_a and dlock_model_b, which must be
# able to log in with the same conninfo).  With --portable the database holds
# the portable edition (portable/dlock.sql) and the conninfo's user is the
# role that installed it (no superuser needed; the two roles must exist).  The seed defaults to
# $DLOCK_MODEL_SEED, else a random one; it is printed first, and passing it
# again replays the same random choices.  Needs DBD::Pg (libdbd-pg-perl).

use strict;
use warnings;

use FindBin;
use lib $FindBin::Bin;
use Getopt::Long;

use Model;

my %o = (conninfo => $ENV{DLOCK_MODEL_CONNINFO} // 'dbname=postgres',
	seed => $ENV{DLOCK_MODEL_SEED}, clients => 6, seconds => 10, resources => 3);
GetOptions(\%o, 'conninfo=s', 'seed=i', 'clients=i', 'seconds=f', 'resources=i',
	'dir=s', 'tag=s', 'check=s', 'portable')
  or exit 2;
my ($v) = defined $o{check} ? Model::check_dir($o{check}) : Model::run(%o);
exit(@$v ? 1 : 0);
