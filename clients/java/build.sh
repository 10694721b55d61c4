#!/bin/sh
# build.sh: build the Java client with javac alone, offline, from Debian's
# jars (no Maven needed; pom.xml is for users).
#
#   sh build.sh                  compile into build/, make build/dlock.jar
#   sh build.sh tests            that, and compile the tests
#   sh build.sh run [CLASS ...]  run the compiled tests (all, or the classes
#                                or Class#method named) in one JVM: one TAP
#                                line per test (TapRunner); exit 1 if any failed
#   sh build.sh test [CLASS ...] tests, then run
#
# Env: JAVA_HOME (default: javac on PATH), DLOCK_JAVA_JARS (default
# /usr/share/java: postgresql.jar and junit5's jars), BUILD (default build).
set -eu
cd "$(dirname "$0")"
jars=${DLOCK_JAVA_JARS:-/usr/share/java}
build=${BUILD:-build}
bin=${JAVA_HOME:+$JAVA_HOME/bin/}
cmd=${1:-}
[ $# -gt 0 ] && shift
cp=$build/classes:$jars/postgresql.jar
for j in junit-jupiter-api junit-jupiter-engine junit-platform-launcher junit-platform-engine \
         junit-platform-commons opentest4j apiguardian-api; do
    cp=$cp:$jars/$j.jar
done
if [ "$cmd" != run ]; then
    rm -rf "$build/classes" "$build/test-classes" "$build/dlock.jar"
    mkdir -p "$build/classes" "$build/test-classes"
    "${bin}javac" --release 17 -Xlint:all -Werror -encoding UTF-8 -d "$build/classes" \
        $(find src/main/java -name '*.java' | sort)
    "${bin}jar" --create --file "$build/dlock.jar" -C "$build/classes" .
fi
case $cmd in
    tests|test)
        "${bin}javac" --release 17 -Xlint:all,-try -Werror -encoding UTF-8 -cp "$cp" \
            -d "$build/test-classes" $(find src/test/java -name '*.java' | sort) ;;
esac
case $cmd in
    run|test) exec "${bin}java" -cp "$build/test-classes:$cp" io.github.dlockpg.dlock.TapRunner "$@" ;;
esac
