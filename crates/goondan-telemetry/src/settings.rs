//! The exporter's settings, read from the standard OpenTelemetry variables
//! once per process. Reading is pure (a lookup function stands in for the
//! environment) so every rule is tested without touching the process
//! environment.

use std::fmt;
use std::time::Duration;

/// The OTLP transports this build speaks. gRPC is left out: it would bring
/// tonic and a second HTTP stack for what every collector also accepts
/// over HTTP (port 4318).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpProtocol {
    /// `http/protobuf`, the default.
    HttpProtobuf,
    /// `http/json`.
    HttpJson,
}

impl OtlpProtocol {
    /// The value of `OTEL_EXPORTER_OTLP_PROTOCOL` that names it.
    pub fn as_str(self) -> &'static str {
        match self {
            OtlpProtocol::HttpProtobuf => "http/protobuf",
            OtlpProtocol::HttpJson => "http/json",
        }
    }
}

/// A variable that cannot be used. The message names the variable and,
/// for anything that may carry a credential (headers), never the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TelemetryError {
    /// The endpoint is not an absolute `http://` or `https://` URL.
    #[error("{variable}: `{value}` is not an http:// or https:// URL")]
    Endpoint {
        /// The variable that held it.
        variable: &'static str,
        /// What it held (an endpoint is an address, not a secret).
        value: String,
    },
    /// The protocol is one this build does not speak.
    #[error("{variable}: protocol `{value}` is not supported")]
    Protocol {
        /// The variable that held it.
        variable: &'static str,
        /// What it held.
        value: String,
    },
    /// A header entry is not `name=value` with a valid header name.
    #[error("{variable}: entry {position} is not `name=value` with a valid header name")]
    Headers {
        /// The variable that held it.
        variable: &'static str,
        /// The 1-based position of the entry in the comma-separated list.
        position: usize,
    },
    /// The timeout is not a whole number of milliseconds.
    #[error("{variable}: `{value}` is not a whole number of milliseconds")]
    Timeout {
        /// The variable that held it.
        variable: &'static str,
        /// What it held.
        value: String,
    },
    /// The SDK refused to build the exporter.
    #[error("the OTLP exporter could not be built: {0}")]
    Exporter(String),
}

impl TelemetryError {
    /// The stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            TelemetryError::Endpoint { .. } => "E_OTEL_ENDPOINT",
            TelemetryError::Protocol { .. } => "E_OTEL_PROTOCOL",
            TelemetryError::Headers { .. } => "E_OTEL_HEADERS",
            TelemetryError::Timeout { .. } => "E_OTEL_TIMEOUT",
            TelemetryError::Exporter(_) => "E_OTEL_EXPORTER",
        }
    }

    /// How to fix it.
    pub fn suggestion(&self) -> &'static str {
        match self {
            TelemetryError::Endpoint { .. } => {
                "set it to the collector's OTLP/HTTP address, e.g. http://127.0.0.1:4318"
            }
            TelemetryError::Protocol { .. } => {
                "use http/protobuf or http/json (collectors accept both on port 4318); gRPC is not built in"
            }
            TelemetryError::Headers { .. } => {
                "write headers as name=value pairs separated by commas, values percent-encoded"
            }
            TelemetryError::Timeout { .. } => "give the timeout in milliseconds, e.g. 10000",
            TelemetryError::Exporter(_) => {
                "check the OTEL_EXPORTER_OTLP_* variables, or unset OTEL_EXPORTER_OTLP_ENDPOINT to turn export off"
            }
        }
    }
}

/// Where and how spans are exported. Exists only when export is on.
#[derive(Clone, PartialEq, Eq)]
pub struct OtlpSettings {
    /// The full URL spans are posted to (`.../v1/traces`).
    pub traces_endpoint: String,
    /// The body encoding.
    pub protocol: OtlpProtocol,
    /// Extra request headers (often an API key: never shown by `Debug`).
    pub headers: Vec<(String, String)>,
    /// How long one export request may take.
    pub timeout: Duration,
    /// `service.name` of every span this process exports.
    pub service_name: String,
    /// Whether message content may be attached to spans
    /// (`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`).
    pub capture_message_content: bool,
}

impl fmt::Debug for OtlpSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let header_names: Vec<&str> = self.headers.iter().map(|(name, _)| name.as_str()).collect();
        f.debug_struct("OtlpSettings")
            .field("traces_endpoint", &self.traces_endpoint)
            .field("protocol", &self.protocol)
            .field("header_names", &header_names)
            .field("timeout", &self.timeout)
            .field("service_name", &self.service_name)
            .field("capture_message_content", &self.capture_message_content)
            .finish()
    }
}

/// The variables that may carry credentials (an `Authorization` header):
/// the orchestrator withholds them from its children's exec environment
/// and hands them over in the spawn handshake, like API keys, and they are
/// masked wherever secrets are.
pub const OTEL_SECRET_VARIABLES: &[&str] = &[
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
];

/// The OTLP default for one export request.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

impl OtlpSettings {
    /// Reads the settings through `lookup` (the process environment in
    /// production). `Ok(None)` means export is off: no endpoint is set, or
    /// `OTEL_SDK_DISABLED=true`. `default_service_name` is used when
    /// `OTEL_SERVICE_NAME` is unset.
    pub fn from_lookup(
        lookup: impl Fn(&str) -> Option<String>,
        default_service_name: &str,
    ) -> Result<Option<OtlpSettings>, TelemetryError> {
        let read = |name: &str| {
            lookup(name)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        if read("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        let traces_endpoint = if let Some(url) = read("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
            // The signal-specific variable is used as written (OTLP spec).
            check_url("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &url)?;
            url
        } else if let Some(base) = read("OTEL_EXPORTER_OTLP_ENDPOINT") {
            check_url("OTEL_EXPORTER_OTLP_ENDPOINT", &base)?;
            format!("{}/v1/traces", base.trim_end_matches('/'))
        } else {
            return Ok(None);
        };
        let protocol = match first_of(
            &read,
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ) {
            None => OtlpProtocol::HttpProtobuf,
            Some((_, value)) if value == "http/protobuf" => OtlpProtocol::HttpProtobuf,
            Some((_, value)) if value == "http/json" => OtlpProtocol::HttpJson,
            Some((variable, value)) => return Err(TelemetryError::Protocol { variable, value }),
        };
        let headers = match first_of(
            &read,
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
            "OTEL_EXPORTER_OTLP_HEADERS",
        ) {
            None => Vec::new(),
            Some((variable, value)) => parse_headers(variable, &value)?,
        };
        let timeout = match first_of(
            &read,
            "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
            "OTEL_EXPORTER_OTLP_TIMEOUT",
        ) {
            None => DEFAULT_TIMEOUT,
            Some((variable, value)) => value
                .parse::<u64>()
                .map(Duration::from_millis)
                .map_err(|_| TelemetryError::Timeout { variable, value })?,
        };
        Ok(Some(OtlpSettings {
            traces_endpoint,
            protocol,
            headers,
            timeout,
            service_name: read("OTEL_SERVICE_NAME")
                .unwrap_or_else(|| default_service_name.to_string()),
            capture_message_content: read("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
                .is_some_and(|v| v.eq_ignore_ascii_case("true")),
        }))
    }

    /// [`OtlpSettings::from_lookup`] over the process environment.
    pub fn from_env(default_service_name: &str) -> Result<Option<OtlpSettings>, TelemetryError> {
        OtlpSettings::from_lookup(|name| std::env::var(name).ok(), default_service_name)
    }
}

/// The signal-specific variable's value, else the general one's, with the
/// name of the variable it came from.
fn first_of(
    read: &impl Fn(&str) -> Option<String>,
    specific: &'static str,
    general: &'static str,
) -> Option<(&'static str, String)> {
    read(specific)
        .map(|value| (specific, value))
        .or_else(|| read(general).map(|value| (general, value)))
}

fn check_url(variable: &'static str, value: &str) -> Result<(), TelemetryError> {
    let invalid = || TelemetryError::Endpoint {
        variable,
        value: value.to_string(),
    };
    let (scheme, rest) = value.split_once("://").ok_or_else(invalid)?;
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if !(scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https"))
        || host.is_empty()
        || value.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(invalid());
    }
    Ok(())
}

/// `name=value,name2=value2` (the W3C Baggage-like format of the OTLP
/// spec), values percent-decoded.
fn parse_headers(
    variable: &'static str,
    text: &str,
) -> Result<Vec<(String, String)>, TelemetryError> {
    let mut headers = Vec::new();
    for (index, entry) in text.split(',').enumerate() {
        let bad = || TelemetryError::Headers {
            variable,
            position: index + 1,
        };
        if entry.trim().is_empty() {
            continue;
        }
        let (name, value) = entry.split_once('=').ok_or_else(bad)?;
        let name = name.trim();
        let value = percent_decode(value.trim()).ok_or_else(bad)?;
        let valid_name = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        if !valid_name || value.chars().any(|c| c.is_control()) {
            return Err(bad());
        }
        headers.push((name.to_ascii_lowercase(), value));
    }
    Ok(headers)
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'%' {
            let hex = text.get(index + 1..index + 3)?;
            decoded.push(u8::from_str_radix(hex, 16).ok()?);
            index += 3;
        } else {
            decoded.push(bytes[index]);
            index += 1;
        }
    }
    String::from_utf8(decoded).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn settings(vars: &[(&str, &str)]) -> Result<Option<OtlpSettings>, TelemetryError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        OtlpSettings::from_lookup(|name| map.get(name).cloned(), "goondan")
    }

    #[test]
    fn no_endpoint_or_a_disabled_sdk_means_export_is_off() {
        assert_eq!(settings(&[]), Ok(None));
        assert_eq!(settings(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "  ")]), Ok(None));
        assert_eq!(
            settings(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
                ("OTEL_SDK_DISABLED", "TRUE"),
            ]),
            Ok(None)
        );
    }

    #[test]
    fn the_general_endpoint_gets_the_traces_path_and_the_specific_one_is_kept() {
        let on = settings(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318/")])
            .unwrap()
            .unwrap();
        assert_eq!(on.traces_endpoint, "http://127.0.0.1:4318/v1/traces");
        assert_eq!(on.protocol, OtlpProtocol::HttpProtobuf);
        assert_eq!(on.timeout, DEFAULT_TIMEOUT);
        assert_eq!(on.service_name, "goondan");
        assert!(!on.capture_message_content);
        let specific = settings(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://ignored:4318"),
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "https://collector/custom",
            ),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "250"),
            ("OTEL_SERVICE_NAME", "support-swarm"),
            ("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(specific.traces_endpoint, "https://collector/custom");
        assert_eq!(specific.protocol, OtlpProtocol::HttpJson);
        assert_eq!(specific.timeout, Duration::from_millis(250));
        assert_eq!(specific.service_name, "support-swarm");
        assert!(specific.capture_message_content);
    }

    #[test]
    fn bad_values_are_coded_errors_naming_the_variable() {
        let endpoint = settings(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "localhost:4318")]).unwrap_err();
        assert_eq!(endpoint.code(), "E_OTEL_ENDPOINT");
        assert!(endpoint.to_string().contains("OTEL_EXPORTER_OTLP_ENDPOINT"));
        for bad in ["ftp://host", "http://", "http://a b"] {
            assert!(
                settings(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", bad)]).is_err(),
                "{bad}"
            );
        }
        let grpc = settings(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ])
        .unwrap_err();
        assert_eq!(grpc.code(), "E_OTEL_PROTOCOL");
        assert!(grpc.suggestion().contains("http/protobuf"));
        let timeout = settings(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
            ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "10s"),
        ])
        .unwrap_err();
        assert_eq!(timeout.code(), "E_OTEL_TIMEOUT");
    }

    #[test]
    fn headers_are_parsed_decoded_and_never_shown() {
        let on = settings(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "Authorization=Bearer%20sk-otel-secret-1,x-team=ops",
            ),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(
            on.headers,
            vec![
                (
                    "authorization".to_string(),
                    "Bearer sk-otel-secret-1".to_string()
                ),
                ("x-team".to_string(), "ops".to_string()),
            ]
        );
        assert!(!format!("{on:?}").contains("sk-otel-secret-1"));
        for bad in ["novalue", "bad name=x", "a=%zz", "a=line%0Abreak"] {
            let error = settings(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
                ("OTEL_EXPORTER_OTLP_HEADERS", &format!("ok=1,{bad}")),
            ])
            .unwrap_err();
            assert_eq!(error.code(), "E_OTEL_HEADERS", "{bad}");
            assert_eq!(
                error,
                TelemetryError::Headers {
                    variable: "OTEL_EXPORTER_OTLP_HEADERS",
                    position: 2
                }
            );
        }
    }
}
