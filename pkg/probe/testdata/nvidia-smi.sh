#!/bin/sh
# Stands in for nvidia-smi in tests: prints the fixture output of the
# device query, or of the compute processes query.
case "$1" in
--query-compute-apps=*) exec cat "$(dirname "$0")/nvidia-smi-apps.csv" ;;
*) exec cat "$(dirname "$0")/nvidia-smi.csv" ;;
esac
