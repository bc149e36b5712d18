# entry.sh restore|save, with PATHS (the literal `path` input, one per line) and KEY: see README.md
set -euo pipefail
store=${CUDAREDIST_TEST_ACTIONS_CACHE:?the act test sets CUDAREDIST_TEST_ACTIONS_CACHE}
mkdir -p "$store"
# like actions/cache: the version hashes the paths as written, before `~` is expanded
version=$(printf '%s|stand-in' "$(printf '%s\n' "$PATHS" | sed '/^$/d' | paste -sd '|')" | sha256sum | cut -c1-64)
entry="$store/$(printf '%s' "$KEY" | sha256sum | cut -c1-16)-${version:0:16}"
# like actions/cache: members are stored relative to the workspace (tar -P keeps their ../)
ws=${GITHUB_WORKSPACE:?}
rel=()
while IFS= read -r p; do
  [ -n "$p" ] || continue
  p=${p/#\~/$HOME}
  rel+=("$(python3 -c 'import os, sys; print(os.path.relpath(sys.argv[1], sys.argv[2]))' "$p" "$ws")")
done <<< "$PATHS"
case "$1" in
  restore)
    if [ -f "$entry.tar" ]; then
      tar -P -C "$ws" -xf "$entry.tar"
      echo "Cache restored from key: $KEY"
      echo "cache-hit=true" >> "$GITHUB_OUTPUT"
    else
      echo "Cache not found for input keys: $KEY"
      echo "cache-hit=false" >> "$GITHUB_OUTPUT"
    fi ;;
  save)
    if [ -f "$entry.tar" ]; then echo "Cache already exists, key: $KEY"; exit 0; fi
    present=()
    for p in "${rel[@]}"; do [ -e "$ws/$p" ] && present+=("$p"); done
    if [ ${#present[@]} -eq 0 ]; then echo "::warning::Path Validation Error: no path found for $KEY"; exit 0; fi
    tar -P -C "$ws" -cf "$entry.tmp" "${present[@]}"
    mv "$entry.tmp" "$entry.tar"
    python3 -c 'import json, os, sys; print(json.dumps({"key": sys.argv[1], "version": sys.argv[2], "paths": sys.argv[3].split("\n"), "size": os.path.getsize(sys.argv[4])}))' \
      "$KEY" "$version" "$PATHS" "$entry.tar" > "$entry.json"
    echo "Cache saved with key: $KEY" ;;
esac
