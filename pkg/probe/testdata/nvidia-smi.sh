#!/bin/sh
# Stands in for nvidia-smi in tests: prints the fixture output.
exec cat "$(dirname "$0")/nvidia-smi.csv"
