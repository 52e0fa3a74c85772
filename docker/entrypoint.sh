#!/bin/sh
# Sets up the environment every pylog container needs, then runs the service's command.
set -e
# The JRE's directory name depends on the CPU architecture.
if [ -z "$JAVA_HOME" ]; then
  JAVA_HOME=$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")
  export JAVA_HOME
fi
# libhdfs (pyarrow's hdfs:// filesystem) finds Hadoop's classes through CLASSPATH.
CLASSPATH=$("$HADOOP_HOME/bin/hadoop" classpath --glob)
export CLASSPATH
exec "$@"
