# bash completion for ditbatch: its commands, each command's options and file names. The
# commands and options come from the binary's own --help, so they are never out of date.
_ditbatch() {
  local cur=${COMP_WORDS[COMP_CWORD]} exe=${COMP_WORDS[0]}
  if ((COMP_CWORD == 1)); then
    mapfile -t COMPREPLY < <(compgen -W "$("$exe" --help 2>/dev/null | sed -n 's/^  \([a-z-]*\)  .*/\1/p') --help --version" -- "$cur")
    return
  fi
  if [[ $cur == -* ]]; then
    mapfile -t COMPREPLY < <(compgen -W "$("$exe" "${COMP_WORDS[1]}" --help 2>/dev/null | grep -o -- '--[a-z0-9-]*' | sort -u)" -- "$cur")
  else
    mapfile -t COMPREPLY < <(compgen -f -- "$cur")
  fi
}
complete -o filenames -F _ditbatch ditbatch
