//! The rules of `Eval` resources (issue 39): unique names, one input per
//! case, thresholds and time limits in range, patterns and schemas that
//! compile, a judge for every rubric, and references to the bundle's own
//! agents, swarms and Models. `gdn run` never reads an Eval, so these
//! rules are all it costs a swarm.

use super::parse::{Local, Parsed, Site};
use crate::codes::Code;
use crate::spec::{Assertion, EvalSpec};
use crate::suggest::closest;
use goondan_types::Diagnostic;
use std::collections::HashMap;

/// Checks every Eval of `parsed`, pushing what is wrong.
pub(crate) fn check_evals(parsed: &Parsed, diagnostics: &mut Vec<Diagnostic>) {
    let agents: Vec<&str> = parsed.agents.iter().map(|a| a.resource.name()).collect();
    let models: Vec<&str> = parsed.models.iter().map(|m| m.resource.name()).collect();
    let swarms: Vec<&str> = parsed.swarms.iter().map(|s| s.resource.name()).collect();
    let names = Names {
        agents: &agents,
        models: &models,
        swarms: &swarms,
    };
    let mut seen: HashMap<&str, &Site> = HashMap::new();
    for eval in &parsed.evals {
        let name = eval.resource.name();
        if let Some(first) = seen.insert(name, &eval.site) {
            diagnostics.push(
                eval.site
                    .at(
                        Code::DuplicateName,
                        format!("Eval/{name} is defined twice"),
                        "metadata.name",
                    )
                    .with_suggestion(format!("rename one; the other is at {}", first.place())),
            );
        }
        check_eval(eval, &names, diagnostics);
    }
}

/// The local names references may use.
struct Names<'a> {
    agents: &'a [&'a str],
    models: &'a [&'a str],
    swarms: &'a [&'a str],
}

fn check_eval(eval: &Local<EvalSpec>, names: &Names<'_>, diagnostics: &mut Vec<Diagnostic>) {
    let site = &eval.site;
    let spec = &eval.resource.spec;
    if let Some(swarm) = &spec.swarm {
        refer(
            site,
            diagnostics,
            "Swarm",
            swarm,
            names.swarms,
            "spec.swarm",
        );
    }
    if let Some(agent) = &spec.agent {
        refer(
            site,
            diagnostics,
            "Agent",
            agent,
            names.agents,
            "spec.agent",
        );
    }
    for (index, model) in spec.models.iter().enumerate() {
        refer(
            site,
            diagnostics,
            "Model",
            model,
            names.models,
            &format!("spec.models[{index}]"),
        );
    }
    if let Some(judge) = &spec.judge {
        match judge.to_object_ref() {
            Ok(reference) if reference.kind == "Model" => refer(
                site,
                diagnostics,
                "Model",
                &reference.name,
                names.models,
                "spec.judge",
            ),
            Ok(reference) => diagnostics.push(
                site.at(
                    Code::RefInvalid,
                    format!("the judge must be a Model, not {reference}"),
                    "spec.judge",
                )
                .with_suggestion("write `judge: Model/<name>`"),
            ),
            Err(error) => {
                diagnostics.push(site.at(Code::RefInvalid, error.to_string(), "spec.judge"))
            }
        }
    }
    check_threshold(site, spec.threshold, "spec.threshold", diagnostics);
    check_timeout(
        site,
        spec.timeout_seconds,
        "spec.timeoutSeconds",
        diagnostics,
    );
    if spec.repeat == Some(0) {
        diagnostics.push(site.at(Code::OutOfRange, "repeat must be at least 1", "spec.repeat"));
    }
    if spec.cases.is_empty() {
        diagnostics.push(
            site.at(
                Code::Schema,
                "an Eval needs at least one case",
                "spec.cases",
            )
            .with_suggestion("add `cases: [{ name: first, input: \"hello\" }]`"),
        );
    }
    let mut case_names: HashMap<&str, usize> = HashMap::new();
    for (index, case) in spec.cases.iter().enumerate() {
        let at = |field: &str| format!("spec.cases[{index}].{field}");
        if case.name.is_empty() {
            diagnostics.push(site.at(Code::Schema, "a case name must not be empty", &at("name")));
        } else if let Some(first) = case_names.insert(&case.name, index) {
            diagnostics.push(
                site.at(
                    Code::DuplicateName,
                    format!("case `{}` is defined twice", case.name),
                    &at("name"),
                )
                .with_suggestion(format!("rename one; the first is spec.cases[{first}]")),
            );
        }
        match (&case.input, case.turns.is_empty()) {
            (Some(_), false) => diagnostics.push(site.at(
                Code::MutuallyExclusive,
                "a case has either `input` or `turns`, not both",
                &at("turns"),
            )),
            (None, true) => diagnostics.push(
                site.at(Code::Schema, "a case needs `input` or `turns`", &at("name"))
                    .with_suggestion("add `input: \"...\"`"),
            ),
            _ => {}
        }
        if let Some(agent) = &case.agent {
            refer(
                site,
                diagnostics,
                "Agent",
                agent,
                names.agents,
                &at("agent"),
            );
        }
        if !case.rubric.is_empty() && spec.judge.is_none() {
            diagnostics.push(
                site.at(
                    Code::Schema,
                    format!(
                        "case `{}` has a rubric, and the Eval names no judge",
                        case.name
                    ),
                    "spec.judge",
                )
                .with_suggestion("add `judge: Model/<name>` to the Eval's spec"),
            );
        }
        check_threshold(site, case.threshold, &at("threshold"), diagnostics);
        check_timeout(
            site,
            case.timeout_seconds,
            &at("timeoutSeconds"),
            diagnostics,
        );
        for (n, assertion) in case.assertions.iter().enumerate() {
            let field = format!("spec.cases[{index}].assert[{n}]");
            match assertion {
                Assertion::Regex(pattern) => {
                    if let Err(error) = regex::Regex::new(pattern) {
                        diagnostics.push(site.at(
                            Code::Schema,
                            format!("`{pattern}` is not a regular expression: {error}"),
                            &format!("{field}.regex"),
                        ));
                    }
                }
                Assertion::JsonSchema(schema) => {
                    if let Err(error) = jsonschema::validator_for(schema) {
                        diagnostics.push(site.at(
                            Code::JsonSchema,
                            format!("not a valid JSON Schema: {error}"),
                            &format!("{field}.jsonSchema"),
                        ));
                    }
                }
                Assertion::AgentAsked(agent) => refer(
                    site,
                    diagnostics,
                    "Agent",
                    agent,
                    names.agents,
                    &format!("{field}.agentAsked"),
                ),
                Assertion::MaxCostUsd(limit) if !(limit.is_finite() && *limit >= 0.0) => {
                    diagnostics.push(site.at(
                        Code::OutOfRange,
                        "maxCostUsd must be a number of dollars, 0 or more",
                        &format!("{field}.maxCostUsd"),
                    ));
                }
                _ => {}
            }
        }
    }
}

/// Pushes a diagnostic unless `name` is one of `known` (the local
/// resources of `kind`).
fn refer(
    site: &Site,
    diagnostics: &mut Vec<Diagnostic>,
    kind: &str,
    name: &str,
    known: &[&str],
    field: &str,
) {
    if known.contains(&name) {
        return;
    }
    let diagnostic = site.at(
        Code::RefNotFound,
        format!("{kind}/{name} is not defined in this bundle"),
        field,
    );
    diagnostics.push(match closest(name, known.iter().copied()) {
        Some(near) => diagnostic.with_suggestion(format!("did you mean {kind}/{near}?")),
        None => diagnostic,
    });
}

fn check_threshold(site: &Site, threshold: Option<f64>, field: &str, out: &mut Vec<Diagnostic>) {
    if let Some(threshold) = threshold {
        if !(0.0..=10.0).contains(&threshold) {
            out.push(site.at(
                Code::OutOfRange,
                format!("a threshold is a score from 0 to 10, not {threshold}"),
                field,
            ));
        }
    }
}

fn check_timeout(site: &Site, seconds: Option<f64>, field: &str, out: &mut Vec<Diagnostic>) {
    if let Some(seconds) = seconds {
        if !(seconds.is_finite() && seconds > 0.0) {
            out.push(site.at(
                Code::OutOfRange,
                format!("a time limit is a number of seconds above 0, not {seconds}"),
                field,
            ));
        }
    }
}
