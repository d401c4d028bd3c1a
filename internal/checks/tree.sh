#!/usr/bin/env bash
# tree.sh — fail when a file git tracks is build output or too big to belong in the tree:
#   - larger than 1 MB (1,000,000 bytes): images, data sets and binaries live elsewhere;
#   - an executable artefact: an ELF, Mach-O or PE (Windows) binary, whatever its mode;
#   - marked executable (mode 100755) without a "#!" line: scripts are fine, builds are not.
# make verify runs it. Build targets write under bin/ and dist/, both git-ignored.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

MAX_BYTES=1000000
bad=0
complain() { echo "tree: $1: $2" >&2; bad=1; }

while IFS= read -r -d '' entry; do
	mode="${entry%% *}"
	path="${entry#*$'\t'}"
	[ -f "$path" ] || continue # deleted in the work tree, or a submodule
	size=$(wc -c <"$path")
	if [ "$size" -gt "$MAX_BYTES" ]; then
		complain "$path" "$size bytes, more than $MAX_BYTES: keep big files out of the repository"
	fi
	magic=$(head -c 4 "$path" | od -An -tx1 | tr -d ' \n')
	case "$magic" in
	7f454c46) complain "$path" "an ELF binary: build output goes to bin/ or dist/ (git-ignored)" ;;
	feedface | feedfacf | cefaedfe | cffaedfe | cafebabe) complain "$path" "a Mach-O binary: build output goes to bin/ or dist/" ;;
	4d5a*) complain "$path" "a PE (Windows) binary: build output goes to bin/ or dist/" ;;
	esac
	if [ "$mode" = 100755 ] && [ "$(head -c 2 "$path")" != '#!' ]; then
		complain "$path" "executable without a #! line: commit scripts, not builds (or git update-index --chmod=-x)"
	fi
done < <(git ls-files -s -z)

exit "$bad"
