# Sourced by scripts/setup and scripts/build-image, whose caches under
# /var/cache/cudaprobe hold what root later runs: only root may write them.

# root_only_dir DIR: makes DIR if missing and prints its physical path; fails
# unless root owns it and neither its group nor others may write it (checked
# before the caller reads or writes anything in it).
root_only_dir() {
  local dir
  mkdir -p "$1" && dir=$(cd "$1" && pwd -P) || return 1
  echo "$dir"
  [ "$(stat -c %u "$dir")" = 0 ] && [ $(( 0$(stat -c %a "$dir") & 022 )) -eq 0 ]
}
