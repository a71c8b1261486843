//! The `--config` file of `idem serve`, merged into its command line.

use std::{ffi::OsString, path::Path};

use clap::{ArgAction, ArgMatches, parser::ValueSource};

use crate::error::ConfigError;

/// The arguments that the config file at `path` adds to a command line of `idem serve`, parsed
/// as `serve`: one per setting that neither a flag nor an environment variable set.
///
/// Going through clap again keeps one parser, one validation and one error message per setting.
pub(crate) fn file_args(
    path: &Path,
    serve_command: &clap::Command,
    serve: &ArgMatches,
) -> Result<Vec<OsString>, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::ReadConfig {
        path: path.to_owned(),
        source,
    })?;
    let table: toml::Table = text.parse().map_err(|source| ConfigError::ParseConfig {
        path: path.to_owned(),
        source,
    })?;
    let invalid = |key: &str, problem| ConfigError::InvalidSetting {
        path: path.to_owned(),
        key: key.to_owned(),
        problem,
    };
    let mut extra = Vec::new();
    for (key, value) in table {
        let flag = key.replace('_', "-");
        let arg = serve_command
            .get_arguments()
            .find(|arg| arg.get_long() == Some(flag.as_str()) && flag != "config")
            .ok_or_else(|| invalid(&key, "an unknown setting"))?;
        let source = serve.value_source(arg.get_id().as_str());
        if matches!(
            source,
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        ) {
            continue;
        }
        let values = match value {
            toml::Value::Boolean(true) if matches!(arg.get_action(), ArgAction::SetTrue) => {
                extra.push(format!("--{flag}").into());
                continue;
            }
            toml::Value::Boolean(false) if matches!(arg.get_action(), ArgAction::SetTrue) => {
                continue;
            }
            toml::Value::String(s) => vec![s],
            toml::Value::Integer(i) => vec![i.to_string()],
            toml::Value::Array(items) => items
                .into_iter()
                .map(|item| match item {
                    toml::Value::String(s) => Ok(s),
                    _ => Err(invalid(&key, "a value of the wrong type for")),
                })
                .collect::<Result<_, _>>()?,
            _ => return Err(invalid(&key, "a value of the wrong type for")),
        };
        if matches!(arg.get_action(), ArgAction::Append) && !values.is_empty() {
            extra.extend(values.iter().map(|v| format!("--{flag}={v}").into()));
        } else {
            extra.push(format!("--{flag}={}", values.join(",")).into());
        }
    }
    Ok(extra)
}
