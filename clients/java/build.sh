#!/bin/sh
# build.sh: build the Java client with javac alone, offline, from Debian's
# jars (no Maven needed; pom.xml is for users).
#
#   sh build.sh              compile into build/ and make build/dlock.jar
#   sh build.sh test [CLASS ...]   also compile the tests and run them (all,
#                            or the classes named) in one JVM: one TAP line
#                            per test (TapRunner), exit 1 if any failed
#
# Env: JAVA_HOME (default: javac on PATH), DLOCK_JAVA_JARS (default
# /usr/share/java: postgresql.jar and junit5's jars), BUILD (default build).
set -eu
cd "$(dirname "$0")"
jars=${DLOCK_JAVA_JARS:-/usr/share/java}
build=${BUILD:-build}
bin=${JAVA_HOME:+$JAVA_HOME/bin/}
rm -rf "$build"
mkdir -p "$build/classes" "$build/test-classes"
"${bin}javac" --release 17 -Xlint:all -Werror -encoding UTF-8 -d "$build/classes" \
    $(find src/main/java -name '*.java' | sort)
"${bin}jar" --create --file "$build/dlock.jar" -C "$build/classes" .
[ "${1:-}" = test ] || exit 0
shift
cp=$build/classes:$jars/postgresql.jar
for j in junit-jupiter-api junit-jupiter-engine junit-platform-launcher junit-platform-engine \
         junit-platform-commons opentest4j apiguardian-api; do
    cp=$cp:$jars/$j.jar
done
"${bin}javac" --release 17 -Xlint:all,-try -Werror -encoding UTF-8 -cp "$cp" -d "$build/test-classes" \
    $(find src/test/java -name '*.java' | sort)
exec "${bin}java" -cp "$build/test-classes:$cp" io.github.dlockpg.dlock.TapRunner "$@"
