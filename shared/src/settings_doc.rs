//! The check that keeps `docs/configuration.md` whole: every setting a binary reads from the environment
//! (its clap definitions, subcommands included) has a row in one of the document's tables, and the row
//! gives its default. Each binary runs it in a test, so CI fails when a setting is added, or its default
//! changed, without the document.

/// The settings of `command` (by environment variable) missing from the tables of `document`, or whose
/// row does not give their default, one line each.
pub fn undocumented(command: &clap::Command, document: &str) -> Vec<String> {
    let rows: Vec<(&str, &str)> = document
        .lines()
        .filter(|line| line.starts_with("| `"))
        .filter_map(|line| {
            let mut cells = line.split(" | ");
            Some((cells.next()?, cells.next()?))
        })
        .collect();
    let mut problems = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    visit(command, &mut |arg| {
        let Some(env) = arg.get_env().and_then(|env| env.to_str()) else { return };
        if !seen.insert(env.to_string()) {
            return;
        }
        let name = format!("`{env}`");
        let own: Vec<&(&str, &str)> = rows.iter().filter(|(names, _)| names.contains(&name)).collect();
        if own.is_empty() {
            problems.push(format!("{env} has no row"));
            return;
        }
        for default in arg.get_default_values() {
            let default = format!("`{}`", default.to_string_lossy());
            if !own.iter().any(|(_, given)| given.contains(&default)) {
                problems.push(format!("{env}: no row gives its default {default}"));
            }
        }
    });
    problems
}

fn visit(command: &clap::Command, each: &mut impl FnMut(&clap::Arg)) {
    command.get_arguments().for_each(&mut *each);
    for sub in command.get_subcommands() {
        visit(sub, each);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_setting_without_a_row_or_without_its_default_is_named() {
        let command = clap::Command::new("x")
            .arg(clap::Arg::new("a").long("a").env("A_SETTING").default_value("5"))
            .arg(clap::Arg::new("b").long("b").env("B_SETTING"))
            .subcommand(clap::Command::new("s").arg(clap::Arg::new("c").long("c").env("C_SETTING").default_value("x")));
        let document = "| `A_SETTING` | `6` | wrong default |\n| `B_SETTING`, `D` | none | fine |\n";
        assert_eq!(
            undocumented(&command, document),
            ["A_SETTING: no row gives its default `5`", "C_SETTING has no row"]
        );
        let fixed = "| `A_SETTING` | `5` | |\n| `B_SETTING` | none | |\n| `C_SETTING` | `x` | |\n";
        assert!(undocumented(&command, fixed).is_empty());
    }
}
