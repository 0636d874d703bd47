#!/usr/bin/env bash
# docs/layers.md names every options struct the module headers declare.
#   options_structs.sh SOURCE_DIR
set -euo pipefail
root=$1
missing=0
for s in $(grep -ho '^struct [A-Za-z]*Options' "$root"/modules/*.h | cut -d' ' -f2); do
    if ! grep -q "\`$s\`" "$root/docs/layers.md"; then
        echo "docs/layers.md does not name $s"
        missing=1
    fi
done
[[ $missing == 0 ]] && echo "every options struct is named"
