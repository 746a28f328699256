# Sourced by the scripts here (after they cd to the repository root).

# write_to FILE COMMAND...: COMMAND's standard output into FILE, which is replaced only once the
# command has succeeded: a failing table script leaves the earlier file as it was (and no
# FILE.tmp); returns the command's status.
write_to() {
  local file=$1 rc=0
  shift
  "$@" > "$file.tmp" || rc=$?
  if [ "$rc" -eq 0 ]; then mv "$file.tmp" "$file"; else rm -f "$file.tmp"; fi
  return "$rc"
}
