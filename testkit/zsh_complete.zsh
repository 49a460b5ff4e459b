# zsh testkit/zsh_complete.zsh FPATH_DIR 'tcl node ': prints, one a line, the candidates an
# interactive zsh offers on Tab for that line, with the completion functions in FPATH_DIR.
# After Valodim/zsh-capture-completion: a zsh on a pty (zpty), compadd wrapped to print what
# it is given, and NUL markers written before and after the completion (comppre/postfuncs).
zmodload zsh/zpty
zpty z zsh -f -i
zpty -w z "fpath=($1 \$fpath); autoload -U compinit; compinit -u -D"
zpty -w z "null-line () { echo -n \$'\0' }"
zpty -w z "compprefuncs=( null-line )"
zpty -w z "comppostfuncs=( null-line exit )"
zpty -w z "zstyle ':completion:*' list-grouped false"
zpty -w z "zstyle ':completion:*' insert-tab false"
zpty -w z "zstyle ':completion:*' list-separator ''"
zpty -w z "zmodload zsh/zutil"
zpty -w z 'compadd () {
  [[ ${@[1,(i)(-|--)]} == *-(O|A|D)\ * ]] && { builtin compadd "$@"; return $? }
  typeset -a __hits __dscr __tmp
  (( $@[(I)-d] )) && { __tmp=${@[$[${@[(i)-d]}+1]]}; [[ $__tmp == \(* ]] && eval "__dscr=$__tmp" || __dscr=( "${(@P)__tmp}" ) }
  builtin compadd -A __hits -D __dscr "$@"
  setopt localoptions norcexpandparam extendedglob
  typeset -A apre hpre hsuf asuf
  zparseopts -E P:=apre p:=hpre S:=asuf s:=hsuf
  integer dirsuf=0
  [[ -z $hsuf && "${${@//-default-/}% -# *}" == *-[[:alnum:]]#f* ]] && dirsuf=1
  [[ -n $__hits ]] || return
  local dsuf
  for i in {1..$#__hits}; do
    (( dirsuf )) && [[ -d $__hits[$i] ]] && dsuf=/ || dsuf=
    echo -E - "CAND:$IPREFIX$apre$hpre$__hits[$i]$dsuf$hsuf$asuf"
  done
}'
zpty -w z "${*[2,-1]}"$'\t'
local all= chunk
integer deadline=$(( SECONDS + 30 ))
while (( SECONDS < deadline )) && [[ ${#${all//[^$'\0']/}} -lt 2 ]]; do
  zpty -rt z chunk && all+=$chunk || sleep 0.05
done
local -a parts; parts=("${(@ps:\0:)all}")
print -r -- "${parts[2]}" | tr -d '\r' | grep '^CAND:' | sed 's/^CAND://'
