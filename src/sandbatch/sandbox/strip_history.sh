# Leave in the repository at $1 (and in every repository below it: submodules, nested
# checkouts) nothing but what its HEAD reaches: the history up to HEAD, the tags on that
# history, the index. Runs inside the sandbox with bash and the image's own git (>= 2.7).
#
# Each repository's .git is rebuilt rather than pruned: a fresh git directory gets HEAD,
# the kept refs, the index, the config without remotes, and one pack written from the
# kept refs and the index; the old git directory (refs, packed-refs, reflogs, stash,
# notes, replace refs, ORIG_HEAD/FETCH_HEAD, packs, loose objects, commit-graph,
# alternates, modules, worktrees, lost-found, rr-cache, ...) is then deleted whole. What
# survives is what was copied, so no list of places where the future may hide is needed.
# The work tree is not touched: uncommitted files stay as they are.
#
# Prints one line per repository:
#   sandbatch-history <path> refs=<before>/<kept> objects=<before>/<after> bytes=<before>/<after> removed=<ref,...>
set -euo pipefail
export GIT_CONFIG_NOSYSTEM=1 GIT_TERMINAL_PROMPT=0 GIT_NO_REPLACE_OBJECTS=1 LC_ALL=C
unset GIT_DIR GIT_WORK_TREE GIT_INDEX_FILE GIT_OBJECT_DIRECTORY GIT_ALTERNATE_OBJECT_DIRECTORIES GIT_COMMON_DIR
top=$(cd "$1" && pwd -P)

# objects and bytes a git directory holds (loose + packed; alternates not counted)
count() {
  git --git-dir="$1" count-objects -v | awk '
    $1 == "count:" || $1 == "in-pack:" { n += $2 }
    $1 == "size:" || $1 == "size-pack:" { k += $2 }
    END { printf "%d %d", n, k * 1024 }'
}

strip_one() {
  local wt=$1 dot="$1/.git" old new head sym fmt refstore shas tags f
  # the git directory from the .git entry itself (no discovery: it would walk up to a
  # parent repository, and stop at a directory another user owns)
  if [ -d "$dot" ]; then old=$dot
  else old=$(sed -n 's/^gitdir: //p' "$dot"); case "$old" in /*) ;; *) old="$wt/$old";; esac; fi
  old=$(cd "$old" 2>/dev/null && pwd -P) && [ -e "$old/HEAD" ] || return 0
  head=$(git --git-dir="$old" rev-parse --verify -q HEAD^{commit}) || return 0  # unborn: nothing to strip
  sym=$(git --git-dir="$old" symbolic-ref -q HEAD || true)
  read -r nb bb <<<"$(count "$old")"
  local refs_before
  refs_before=$(git --git-dir="$old" for-each-ref --format=x | wc -l)
  # tags whose commit HEAD reaches stay (`git describe`, version files from tags)
  tags=$(git --git-dir="$old" for-each-ref --merged "$head" --format='%(refname) %(objectname)' refs/tags 2>/dev/null || true)

  fmt=$(git --git-dir="$old" rev-parse --show-object-format 2>/dev/null || echo sha1)
  refstore=$(git --git-dir="$old" config --get extensions.refstorage || echo files)
  new="$wt/.git.sandbatch-new"
  rm -rf "$new"
  local init=(init -q --bare --template=)
  [ "$fmt" = sha1 ] || init+=(--object-format="$fmt")
  [ "$refstore" = files ] || init+=(--ref-format="$refstore")
  git "${init[@]}" "$new" >/dev/null

  # config: the old one without remotes, branch tracking, URLs or credentials; core.bare and
  # core.worktree go (the new directory is the work tree's own .git)
  # (edited as a file: core.worktree is relative to where the git directory was)
  local cfg="$new/config"
  cp "$old/config" "$cfg"
  for f in $(git config -f "$cfg" --name-only --get-regexp '^(remote|branch|url|http|credential|lfs|submodule)\.' \
             | sed -E 's/\.[^.]+$//' | sort -u); do
    git config -f "$cfg" --remove-section "$f" 2>/dev/null || true
  done
  git config -f "$cfg" --unset-all core.worktree || true
  git config -f "$cfg" --unset-all extensions.partialclone || true
  git config -f "$cfg" core.bare false
  [ ! -f "$old/config.worktree" ] || cp "$old/config.worktree" "$new/"
  # the index as it is (stat data included, so `git status` sees the same work tree)
  [ ! -f "$old/index" ] || cp -p "$old/index" "$new/"
  for f in "$old"/sharedindex.*; do [ ! -f "$f" ] || cp -p "$f" "$new/"; done
  mkdir -p "$new/info"
  for f in exclude attributes sparse-checkout; do [ ! -f "$old/info/$f" ] || cp "$old/info/$f" "$new/info/"; done
  # a shallow boundary stays where HEAD's history needs it
  if [ -s "$old/shallow" ]; then
    git --git-dir="$old" rev-list "$head" | grep -Fx -f "$old/shallow" >"$new/shallow" || rm -f "$new/shallow"
  fi

  # linked worktrees are checkouts of other commits: they go with their entries
  local gone="" w
  for f in "$old"/worktrees/*/gitdir; do
    [ -f "$f" ] || continue
    w=$(dirname "$(cat "$f")")
    if [ "$w" != "$wt" ] && [ -f "$w/.git" ]; then rm -rf "$w"; gone="$gone"$'\n'"worktree:$w"; fi
  done
  rm -rf "$old/worktrees"  # their indexes would keep their objects in the pack
  # one pack of what HEAD, the kept tags and the index reach; nothing else is copied
  shas=$({ echo "$head"; [ -z "$tags" ] || printf '%s\n' "$tags" | awk '{print $2}'; } | sort -u)
  printf '%s\n' "$shas" | git --git-dir="$old" -c core.fsync=none \
    pack-objects --revs --indexed-objects --delta-base-offset -q "$new/objects/pack/pack" >/dev/null
  { if [ -n "$sym" ]; then echo "update $sym $head"; fi
    [ -z "$tags" ] || printf '%s\n' "$tags" | awk '{print "update " $1 " " $2}'; } |
    git --git-dir="$new" -c core.logAllRefUpdates=false update-ref --stdin
  if [ -n "$sym" ]; then git --git-dir="$new" symbolic-ref HEAD "$sym"
  else git --git-dir="$new" -c core.logAllRefUpdates=false update-ref --no-deref HEAD "$head"; fi

  local removed
  removed=$( (git --git-dir="$old" for-each-ref --format='%(refname)' |
            grep -Fxv -f <(git --git-dir="$new" for-each-ref --format='%(refname)'; echo "${sym:-HEAD}") |
            head -n 20; [ -z "$gone" ] || echo "${gone#?}") | paste -sd, - || true)
  read -r na ba <<<"$(count "$new")"
  # swap: the old git directory goes whole (for a submodule, the module directory its
  # .git file pointed at; a git directory outside the tree is left where it is)
  if [ -d "$dot" ]; then mv "$dot" "$wt/.git.sandbatch-old"; else rm -f "$dot"; fi
  mv "$new" "$dot"
  rm -rf "$wt/.git.sandbatch-old"
  case "$old" in "$top"/*) [ "$old" = "$dot" ] || rm -rf "$old";; esac
  [ "$(git --git-dir="$dot" rev-parse HEAD)" = "$head" ]
  echo "sandbatch-history .${wt#"$top"} refs=$refs_before/$(git --git-dir="$dot" for-each-ref --format=x | wc -l)" \
       "objects=$nb/$na bytes=$bb/$ba removed=${removed:-}"
}

# deepest first: a submodule is rebuilt into its own .git before its parent's git
# directory (holding the old module directory) is deleted
find "$top" -name .git.sandbatch-new -prune -o -name .git -prune -print | awk -F/ '{print NF "\t" $0}' |
  sort -rn | cut -f2- | while IFS= read -r dot; do strip_one "${dot%/.git}"; done
