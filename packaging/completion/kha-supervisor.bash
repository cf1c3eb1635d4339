# bash completion for kha-supervisor(8)                      -*- shell-script -*-
#
# Self-contained: it works with or without the bash-completion package's
# helpers. The command list comes from `kha-supervisor help`, so commands
# added in a later version complete without a new version of this file.

_kha_supervisor_commands()
{
    local out
    out=$("$1" help 2>/dev/null | awk '
        /^commands:/ { on = 1; next }
        on && /^  [a-z]/ { print $1; next }
        on && /^$/ { exit }')
    if [[ -z $out ]]; then
        out=$'run\nstatus\nguard\ncheck-config\ninstall-dropins\nversion'
    fi
    printf '%s\nhelp\n' "$out"
}

_kha_supervisor()
{
    local cur=${COMP_WORDS[COMP_CWORD]}
    local prev=${COMP_WORDS[COMP_CWORD - 1]}
    local IFS=$'\n'
    COMPREPLY=()

    if ((COMP_CWORD == 1)); then
        COMPREPLY=($(compgen -W "$(_kha_supervisor_commands "${COMP_WORDS[0]}")" -- "$cur"))
        return
    fi

    case $prev in
        -c | --c | -binary | --binary)
            COMPREPLY=($(compgen -f -- "$cur"))
            compopt -o filenames 2>/dev/null
            return
            ;;
        -dir | --dir)
            COMPREPLY=($(compgen -d -- "$cur"))
            compopt -o filenames 2>/dev/null
            return
            ;;
    esac

    local opts=""
    case ${COMP_WORDS[1]} in
        run | check-config) opts="-c" ;;
        status) opts="-c --json" ;;
        install-dropins) opts="-c --dry-run --dir --no-reload --binary" ;;
        handoff) opts="-c --to --wait --timeout" ;;
        freeze) opts="-c --reason" ;;
        unfreeze | unban) opts="-c" ;;
        ban) opts="-c --for --reason" ;;
        history) opts="-c --json --limit" ;;
        install-kubeconfig) opts="-c --kubeconfig --dry-run" ;;
        api-fence)
            if ((COMP_CWORD == 2)); then
                opts="manifests status"
            elif [[ ${COMP_WORDS[2]} == manifests ]]; then
                opts="--supervisor-user --token --rbac-only"
            else
                opts="-c"
            fi
            ;;
        drill)
            if ((COMP_CWORD == 2)); then
                opts="handoff failover"
            elif [[ ${COMP_WORDS[2]} == handoff ]]; then
                opts="-c --to --expect-within --timeout"
            else
                opts="-c --expect-within --timeout"
            fi
            ;;
        guard)
            opts="-c"
            if [[ $cur != -* ]]; then
                # The unit to ask about: the services systemd knows.
                COMPREPLY=($(compgen -W "$(systemctl list-units --all --type=service --plain --no-legend 2>/dev/null | awk '{ print $1 }')" -- "$cur"))
                return
            fi
            ;;
    esac
    IFS=$' \t\n'
    COMPREPLY=($(compgen -W "$opts" -- "$cur"))
}

complete -F _kha_supervisor kha-supervisor
