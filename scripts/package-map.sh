#!/usr/bin/env bash
# Prints the package map of the server's module: each package, its non-test Go files and
# lines, and the packages of this module it imports (the floors of docs/architecture.md).
#
#   scripts/package-map.sh            # a Markdown table on stdout
set -euo pipefail
cd "$(dirname "$0")/.."
mod=$(go list -m)
echo "| package | files | lines | imports (this module) |"
echo "|---|---|---|---|"
go list -f '{{.ImportPath}}|{{.Dir}}|{{join .GoFiles " "}}|{{join .Imports " "}}' ./... |
while IFS='|' read -r pkg dir files imports; do
  [ -n "$files" ] || continue
  n=0; lines=0
  for f in $files; do n=$((n + 1)); lines=$((lines + $(wc -l <"$dir/$f"))); done
  own=$(for i in $imports; do case $i in "$mod"/*) echo "${i#"$mod"/}";; esac; done | tr '\n' ' ')
  echo "| ${pkg#"$mod"/} | $n | $lines | ${own% } |"
done
