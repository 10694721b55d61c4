# dlock: leased distributed locks with fencing tokens for PostgreSQL (PGXS).
#
#   make && make install       build and install the extension and the CLI
#                              (WERROR=1: warnings are errors, as in CI)
#   make installcheck          regression, isolation and TAP tests, each on a
#                              throwaway cluster with dlock preloaded
# test/run-tests is the one command that does all of it on a fresh machine.

EXTENSION = dlock
MODULE_big = dlock
EXTVERSION = $(shell sed -n "s/^default_version = '\(.*\)'/\1/p" dlock.control)
DATA = $(wildcard sql/dlock--*.sql)
OBJS = $(patsubst %.c,%.o,$(wildcard src/*.c))

# Warnings are errors only with WERROR=1 (CI and test/run-tests.sh set it;
# users building with another compiler need not).
PG_CFLAGS = -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers $(if $(filter 1,$(WERROR)),-Werror)

# pg_regress: test/sql/*.sql, expected output in test/expected/*.out
REGRESS = $(sort $(basename $(notdir $(wildcard test/sql/*.sql))))
REGRESS_OPTS = --inputdir=test --temp-instance=tmp_check --temp-config=test/dlock.conf --load-extension=dlock

ISOLATION = $(sort $(basename $(notdir $(wildcard test/isolation/specs/*.spec))))
ISOLATION_OPTS = --inputdir=test/isolation --outputdir=output_iso --temp-instance=tmp_check_iso --temp-config=test/dlock.conf --load-extension=dlock

TAP_TESTS = 1
PROVE_TESTS = test/t/*.pl

# The throwaway clusters never depend on the caller's locale (LANG set to a
# locale that is not generated makes initdb fail): pg_regress and isolation
# clusters are initialised --no-locale in UTF8.
NO_LOCALE = 1
ENCODING = UTF8

# Named in the "+++ regress install-check in DIR +++" lines of PGXS.
subdir = $(CURDIR)

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# After the include: PGXS sets PROVE_FLAGS (empty) and PROVE.  The TAP tests'
# initdb (PostgreSQL::Test::Cluster) sees LANG and LC_* (it drops only
# LC_ALL): run them under the C locale.
PROVE_FLAGS = --timer
PROVE := env -u LC_ALL -u LC_CTYPE -u LC_COLLATE -u LC_MESSAGES -u LC_MONETARY -u LC_NUMERIC -u LC_TIME -u LANGUAGE LANG=C $(PROVE)

# The CLI (cli/) is built and installed with the extension; SKIP_CLI=1
# leaves it out.
ifndef SKIP_CLI
all: cli
install: install-cli
clean: clean-cli
endif

.PHONY: cli install-cli clean-cli
cli:
	@if [ -f cli/Makefile ]; then $(MAKE) -C cli PG_CONFIG=$(PG_CONFIG) WERROR=$(WERROR); fi
install-cli:
	@if [ -f cli/Makefile ]; then $(MAKE) -C cli install PG_CONFIG=$(PG_CONFIG); fi
clean-cli:
	@if [ -f cli/Makefile ]; then $(MAKE) -C cli clean; fi

# The three kinds of tests separately (installcheck runs all three).
.PHONY: installcheck-regress installcheck-isolation installcheck-tap
installcheck-regress:
	$(pg_regress_installcheck) $(REGRESS_OPTS) $(REGRESS)
installcheck-isolation:
	$(pg_isolation_regress_installcheck) $(ISOLATION_OPTS) $(ISOLATION)
installcheck-tap:
	$(prove_installcheck)

# make dist: the PGXN archive dlock-VERSION.zip of the last commit (git
# archive: what is committed, nothing else), VERSION as in META.json.
# DIST_ZIP names another output file.
DIST_VERSION = $(shell sed -n 's/^   "version": "\([^"]*\)",$$/\1/p' $(srcdir)/META.json)
DIST_ZIP ?= dlock-$(DIST_VERSION).zip
.PHONY: dist
dist:
	@git diff --quiet HEAD || echo "make dist: uncommitted changes are left out (it archives HEAD)" >&2
	git archive --format=zip --prefix=dlock-$(DIST_VERSION)/ -o $(DIST_ZIP) HEAD
