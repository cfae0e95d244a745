//! Issue 48 #6: the onion's order and its short cuts, end to end through
//! a real `gdn` with script extensions in both languages beside a Rust
//! one (seed 000 §2, §3): the Agent's YAML `extensions` order is the
//! onion's order, lower priority is further out, ties (default 0, a Rust
//! layer beside a script one) keep the YAML order; a `step` layer that
//! never calls `next()` makes no model call and a `toolCall` layer that
//! answers itself skips the handler; a script's `api.state` is written to
//! `extensions/<name>.json` after a failed Turn too.

use crate::mock_llm::{ChatRequest, MockLlm, Reply};
use crate::swarm::{code, find_instance, stderr, stdout, Swarm};
use serde_json::{json, Value};

/// A toolCall layer that appends its name to `args.trace` before `next()`
/// (config `name`, `priority`), or answers the call itself (`answer`);
/// with `skipStep`, a step layer that returns without `next()`; with
/// `count`, a turn layer counting Turns in its state before `next()`.
const TRACER_PY: &str = r#"async def register(api, config):
    name = config["name"]

    async def trace(ctx):
        if config.get("answer"):
            return {"toolCallId": ctx.tool_call_id, "toolName": ctx.tool_name,
                    "status": "ok", "output": {"answeredBy": name}}
        args = dict(ctx.args)
        args["trace"] = (args.get("trace") or "") + name + ","
        ctx.args = args
        return await ctx.next()

    api.pipeline.register("toolCall", trace, {"priority": config.get("priority", 0)})

    if config.get("count"):
        async def count(ctx):
            saved = await api.state.get() or {"turns": 0}
            await api.state.set({"turns": saved["turns"] + 1})
            return await ctx.next()

        api.pipeline.register("turn", count)
"#;

const TRACER_TS: &str = r#"export function register(api: any, config: any): void {
  const name: string = config.name;
  api.pipeline.register('toolCall', async (ctx: any) => {
    if (config.answer) {
      return { toolCallId: ctx.toolCallId, toolName: ctx.toolName, status: 'ok', output: { answeredBy: name } };
    }
    ctx.args = { ...ctx.args, trace: (ctx.args.trace ?? '') + name + ',' };
    return ctx.next();
  }, { priority: config.priority ?? 0 });
  if (config.skipStep) {
    api.pipeline.register('step', async (_ctx: any) => ({
      status: 'completed', hasToolCalls: false, toolCalls: [], toolResults: [], metadata: { skippedBy: name },
    }));
  }
}
"#;

/// The tool: records that its handler ran and returns the trace.
const MARK_TOOL: &str = r#"import { appendFileSync } from "node:fs";
import { join } from "node:path";

export const handlers = {
  run: async (ctx, input) => {
    appendFileSync(join(ctx.workdir, "handler-ran.txt"), "ran\n");
    return { trace: input.trace ?? "" };
  },
};
"#;

/// One extension resource of the bundle.
struct Layer {
    resource: &'static str,
    /// `None` for a built-in (`Extension/<resource>` of `@goondan/base`).
    entry: Option<&'static str>,
    config: Value,
}

fn script(resource: &'static str, entry: &'static str, config: Value) -> Layer {
    Layer {
        resource,
        entry: Some(entry),
        config,
    }
}

/// A one-agent swarm whose `extensions` are `layers` in this order, the
/// model calling `mark__run` once and then answering with its result.
fn swarm(layers: &[Layer], decide: fn(&ChatRequest) -> Reply) -> Swarm {
    let mock = MockLlm::start(decide);
    let bundle = tempfile::tempdir().unwrap();
    let mut refs = String::new();
    let mut resources = String::new();
    for layer in layers {
        refs.push_str(&format!("    - ref: Extension/{}\n", layer.resource));
        match layer.entry {
            Some(entry) => resources.push_str(&format!(
                "---\napiVersion: goondan.ai/v1\nkind: Extension\nmetadata:\n  name: {}\nspec:\n  entry: ./{entry}\n  config: {}\n",
                layer.resource, layer.config
            )),
            None => refs.push_str(&format!("      config: {}\n", layer.config)),
        }
    }
    let yaml = format!(
        r#"{model}apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: alpha
spec:
  modelConfig:
    modelRef: Model/mock-gpt
  tools:
    - ref: Tool/mark
  extensions:
{refs}---
apiVersion: goondan.ai/v1
kind: Tool
metadata:
  name: mark
spec:
  entry: ./mark.mjs
  exports:
    - name: run
      description: Records that it ran.
      parameters:
        type: object
        properties:
          trace: {{ type: string }}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata:
  name: default
spec:
  entryAgent: Agent/alpha
  agents:
    - ref: Agent/alpha
  policy:
    shutdown:
      gracePeriodSeconds: 1
{resources}"#,
        model = mock.model_yaml()
    );
    std::fs::write(bundle.path().join("goondan.yaml"), yaml).unwrap();
    std::fs::write(bundle.path().join("tracer.py"), TRACER_PY).unwrap();
    std::fs::write(bundle.path().join("tracer.ts"), TRACER_TS).unwrap();
    std::fs::write(bundle.path().join("mark.mjs"), MARK_TOOL).unwrap();
    Swarm {
        bundle,
        state: tempfile::tempdir().unwrap(),
        mock,
    }
}

fn call_then_answer(request: &ChatRequest) -> Reply {
    match request.tool_result() {
        None => Reply::tool("mark__run", json!({})),
        Some(result) => Reply::text(format!("result: {result}")),
    }
}

fn handler_runs(swarm: &Swarm) -> usize {
    std::fs::read_to_string(swarm.bundle.path().join("handler-ran.txt"))
        .map(|text| text.lines().count())
        .unwrap_or(0)
}

#[test]
fn must_order_the_onion_by_priority_then_by_the_yaml_extensions_order() {
    let swarm = swarm(
        &[
            script("one", "tracer.py", json!({"name": "one"})),
            script("neg", "tracer.ts", json!({"name": "neg", "priority": -1})),
            script("two", "tracer.ts", json!({"name": "two"})),
            script(
                "three",
                "tracer.py",
                json!({"name": "three", "priority": 0}),
            ),
            script("deep", "tracer.py", json!({"name": "deep", "priority": 5})),
        ],
        call_then_answer,
    );
    let output = swarm.run(&["run", "--input", "go"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    // Outermost first: what each layer added before `next()`.
    assert!(
        stdout(&output).contains(r#"neg,one,two,three,deep,"#),
        "{}",
        stdout(&output)
    );
    assert_eq!(handler_runs(&swarm), 1);
}

/// A Rust layer and a script layer at the same (default) priority: the
/// one first in YAML is outside. `tool-approval` gates only calls whose
/// `trace` already holds `gate,`, so it gates exactly when the script
/// layer that adds it runs outside it.
#[test]
fn must_keep_the_yaml_order_between_a_rust_and_a_script_layer_of_equal_priority() {
    let approval = || Layer {
        resource: "tool-approval",
        entry: None,
        config: json!({"tools": ["mark__run"], "when": {"trace": "*gate,*"}}),
    };
    let rust_outside = swarm(
        &[
            approval(),
            script("gate", "tracer.py", json!({"name": "gate"})),
        ],
        call_then_answer,
    );
    let output = rust_outside.run(&["run", "--input", "go"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(
        handler_runs(&rust_outside),
        1,
        "the outer Rust layer saw `gate,`"
    );

    let script_outside = swarm(
        &[
            script("gate", "tracer.ts", json!({"name": "gate"})),
            approval(),
        ],
        call_then_answer,
    );
    let resident = script_outside.start_resident();
    let asker = script_outside.spawn_input("go");
    let waiting = crate::swarm::wait_until("the gated call", || {
        let waiting = crate::approvals::approvals(&script_outside);
        (!waiting.is_empty()).then_some(waiting)
    });
    assert_eq!(waiting[0]["arguments"]["trace"], "gate,");
    assert_eq!(handler_runs(&script_outside), 0);
    drop(resident);
    let _ = crate::swarm::finish(asker, "the input whose swarm stopped");
}

#[test]
fn must_skip_the_model_when_a_step_layer_never_calls_next_and_the_handler_when_a_tool_call_layer_answers(
) {
    let skipping = swarm(
        &[script(
            "skip",
            "tracer.ts",
            json!({"name": "skip", "skipStep": true}),
        )],
        call_then_answer,
    );
    let output = skipping.run(&["run", "--input", "go"]);
    assert!(
        skipping.mock.requests().is_empty(),
        "a model was asked: {}",
        stderr(&output)
    );
    assert_eq!(handler_runs(&skipping), 0);

    for entry in ["tracer.py", "tracer.ts"] {
        let answering = swarm(
            &[script(
                "answer",
                entry,
                json!({"name": "answer", "answer": true}),
            )],
            call_then_answer,
        );
        let output = answering.run(&["run", "--input", "go"]);
        assert_eq!(code(&output), 0, "{entry}: {}", stderr(&output));
        assert_eq!(handler_runs(&answering), 0, "{entry}: the handler ran");
        assert!(
            stdout(&output).contains("answeredBy") && stdout(&output).contains("answer"),
            "{entry}: {}",
            stdout(&output)
        );
    }
}

#[test]
fn must_write_a_script_extensions_state_to_its_file_after_a_failed_turn_too() {
    fn fail(_: &ChatRequest) -> Reply {
        Reply::Status(500)
    }
    let swarm = swarm(
        &[script(
            "counter",
            "tracer.py",
            json!({"name": "counter", "count": true}),
        )],
        fail,
    );
    for _ in 0..2 {
        let output = swarm.run(&["run", "--input", "go"]);
        assert_ne!(code(&output), 0, "the model's 500 did not fail the Turn");
    }
    let dir = find_instance(swarm.state.path(), "alpha", "default").expect("the instance");
    let state: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("extensions/counter.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(state["turns"], 2, "{state}");
}
