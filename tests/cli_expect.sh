#!/usr/bin/env bash
# usage: cli_expect.sh CODE TEXT COMMAND [ARGS...]
# Runs COMMAND; passes when it exits with CODE and its output (stdout and stderr) contains
# TEXT verbatim.
code=$1 text=$2
shift 2
out=$("$@" 2>&1)
got=$?
printf '%s\n' "$out"
if [ "$got" -ne "$code" ]; then
  echo "cli_expect.sh: exit code $got, expected $code" >&2
  exit 1
fi
if ! grep -qF -- "$text" <<< "$out"; then
  echo "cli_expect.sh: the output does not contain: $text" >&2
  exit 1
fi
