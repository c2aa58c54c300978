# Sourced by the device scripts: the lent GPU machine returns at most 8 files from $OUT (the
# device tool's README, "Limits"); more are dropped without a word. bundle_out, run on exit, keeps
# the 7 smallest files (the summaries and short logs) as they are and packs every other file into
# $OUT/bundle.tar.gz, so that everything comes back.
bundle_out() {
    [ -d "${OUT:-}" ] || return 0
    local n list
    n=$(find "$OUT" -type f | wc -l)
    [ "$n" -le 8 ] && return 0
    list=$(mktemp)
    (cd "$OUT" && find . -type f -printf '%s\t%P\n' | sort -n | tail -n +8 | cut -f2- >"$list")
    if (cd "$OUT" && tar czf "$list.tar.gz" -T "$list" && xargs -d '\n' rm -f <"$list"); then
        mv "$list.tar.gz" "$OUT/bundle.tar.gz"
        find "$OUT" -mindepth 1 -type d -empty -delete
        echo "\$OUT: $(wc -l <"$list") of its $n files packed into bundle.tar.gz (8 files come back at most)"
    fi
    rm -f "$list" "$list.tar.gz"
}
