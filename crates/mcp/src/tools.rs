//! The tool set and its input schemas. Each tool is the agent runs' own: the same sandbox and
//! limits, the same search backends and address refusals, the same observation words, so what an
//! MCP host sees is what a model in a Catena run would have read.

use crate::McpOptions;
use crate::agent_run::AgentRun;
use crate::blocking::on_blocking_pool;
use catena_agent::tools::{CallContext, CallLimits, ToolOutput, run_program};
use catena_protocol::{Profile, Tag};
use catena_sandbox::Sandbox;
use catena_service::{Service, ServiceError, WORKSPACE_GUEST_PATH};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock,
    Implementation, ListToolsResult, PaginatedRequestParams, ProtocolVersion, ResultType,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, schemars, tool, tool_router};
use serde::Deserialize;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// The tools, as one MCP server handler. Cheap to clone: Streamable HTTP makes one per request.
#[derive(Clone)]
pub struct CatenaTools {
    shared: Arc<Shared>,
    tool_router: ToolRouter<CatenaTools>,
}

/// What every copy of the handler shares.
struct Shared {
    service: Arc<Service>,
    options: McpOptions,
    /// The sandbox with the user's workspace mounted, made on first use (without a workspace,
    /// programs run in the agent runs' own sandbox).
    workspace_sandbox: tokio::sync::OnceCell<Arc<Sandbox>>,
    /// Programs running at once: one per core. Each may take the agent runs' memory cap, and a
    /// client sending many calls at once must queue rather than take the machine.
    programs: tokio::sync::Semaphore,
}

/// `run_python`'s input.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct RunPython {
    /// The Python 3 program to run.
    pub code: String,
    /// Text the program reads on its standard input.
    #[serde(default)]
    pub stdin: Option<String>,
}

/// The input of `web_search` and `wiki_search`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct Search {
    /// What to search for.
    pub query: String,
}

/// `crawl_page`'s input.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct CrawlPage {
    /// The pages to read (at most 5): http(s) addresses, or the file:// and zim:// addresses
    /// of documents in the local index.
    pub urls: Vec<String>,
    /// What to look for: each page's summary is written for it.
    #[serde(default)]
    pub goal: Option<String>,
}

impl CatenaTools {
    pub fn new(service: Arc<Service>, options: McpOptions) -> CatenaTools {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        CatenaTools {
            shared: Arc::new(Shared {
                service,
                options,
                workspace_sandbox: tokio::sync::OnceCell::new(),
                programs: tokio::sync::Semaphore::new(cores),
            }),
            tool_router: Self::tool_router(),
        }
    }

    /// The sandbox programs run in: the workspace's, or the agent runs' own.
    async fn sandbox(&self) -> Result<Arc<Sandbox>, ErrorData> {
        let service = self.shared.service.clone();
        let Some(workspace) = self.shared.options.workspace.clone() else {
            return on_blocking_pool(move || service.python_sandbox(None)).await;
        };
        self.shared
            .workspace_sandbox
            .get_or_try_init(|| on_blocking_pool(move || service.python_sandbox(Some(&workspace))))
            .await
            .cloned()
    }

    /// Runs the agent runs' own `tag` tool on `input`, as a run with no model of its own would.
    async fn agent_tool(
        &self,
        tag: Tag,
        input: String,
        goal: Option<String>,
    ) -> Result<CallToolResult, ErrorData> {
        let service = self.shared.service.clone();
        let output = on_blocking_pool(move || {
            let mut profile =
                Profile::builtin("all-tools").map_err(|e| ServiceError::internal(e.to_string()))?;
            // This tool alone, whichever profiles name it.
            profile.tools = vec![tag];
            let tools = service.toolbox(&profile)?;
            let tool = tools.get(tag).ok_or_else(|| {
                ServiceError::internal(format!("the {tag} tool is not in this build"))
            })?;
            let mut context = CallContext {
                last_search: goal.as_deref(),
                ..CallContext::default()
            };
            Ok(tool.call(&input, &mut context))
        })
        .await?;
        Ok(tool_result(output))
    }
}

#[tool_router]
impl CatenaTools {
    #[tool(
        description = "Run a Python 3 program in Catena's WebAssembly sandbox (CPython, the \
                       standard library, no network, no host files, no processes; a fresh \
                       folder as `/`) with the limits of Catena's agent runs: a wall-time \
                       deadline, a memory cap and capped output. When the server was started \
                       with a workspace, its folder is at /workspace. The result is the program's \
                       output in the words Catena's agent models read: `[EXECUTED] Code exited \
                       with status 0.` and the output between [STDOUT:BEGIN] and [STDOUT:END], or \
                       `[FAILED] ...` with stderr.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn run_python(
        &self,
        Parameters(input): Parameters<RunPython>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let sandbox = self.sandbox().await?;
        let _turn = self
            .shared
            .programs
            .acquire()
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let stop = StopOnDrop::default();
        let limits = CallLimits {
            deadline: None,
            cancel: Some(stop.0.clone()),
        };
        let program = tokio::task::spawn_blocking(move || {
            let stdin = input.stdin.unwrap_or_default();
            run_program(&sandbox, &input.code, stdin.as_bytes(), &limits)
        });
        tokio::select! {
            output = program => output
                .map(tool_result)
                .map_err(|e| ErrorData::internal_error(format!("the program's thread failed: {e}"), None)),
            // The client cancelled the call: `stop` ends the program as it is dropped here.
            () = context.ct.cancelled() => Err(ErrorData::internal_error("the call was cancelled", None)),
        }
    }

    #[tool(
        description = "Search the web or the local document index, whichever Catena's settings \
                       set up, as Catena's agent runs do: ten hits with titles, addresses and \
                       snippets.",
        annotations(read_only_hint = true, open_world_hint = true)
    )]
    async fn web_search(
        &self,
        Parameters(input): Parameters<Search>,
    ) -> Result<CallToolResult, ErrorData> {
        self.agent_tool(Tag::WebSearch, input.query, None).await
    }

    #[tool(
        description = "Read pages and summarise each for a goal, as Catena's agent runs do: web \
                       pages (never this machine's own or private addresses) and documents of \
                       the local index by their file:// or zim:// address, at most 5 a call.",
        annotations(read_only_hint = true, open_world_hint = true)
    )]
    async fn crawl_page(
        &self,
        Parameters(input): Parameters<CrawlPage>,
    ) -> Result<CallToolResult, ErrorData> {
        let urls = input.urls.join(" | ");
        self.agent_tool(Tag::CrawlPage, urls, input.goal).await
    }

    #[tool(
        description = "Search the local passage index (a Wikipedia dump or the user's passages) \
                       for passages about the query.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn wiki_search(
        &self,
        Parameters(input): Parameters<Search>,
    ) -> Result<CallToolResult, ErrorData> {
        self.agent_tool(Tag::WikiSearch, input.query, None).await
    }

    #[tool(
        description = "Give a task to Catena's own agent model: one whole Chain-of-Agents run \
                       (plan, think, tool calls in the sandbox and the search tools, reflection, \
                       answer) by the model Catena serves, stored in Catena's history like any \
                       run. Returns the answer, every tool call with its observation, and the \
                       stored run's id.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            open_world_hint = true
        )
    )]
    async fn agent_run(
        &self,
        Parameters(input): Parameters<AgentRun>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        crate::agent_run::run(self.shared.service.clone(), input, context).await
    }
}

impl ServerHandler for CatenaTools {
    fn get_info(&self) -> ServerConfig {
        let mut instructions = String::from(
            "Catena runs agent models on this machine. run_python runs Python in a WebAssembly \
             sandbox; agent_run gives a whole task to the local agent model.",
        );
        if let Some(workspace) = &self.shared.options.workspace {
            instructions.push_str(&format!(
                " Programs see the user's folder at {WORKSPACE_GUEST_PATH} ({}).",
                if workspace.writable {
                    "they may change it"
                } else {
                    "read-only"
                }
            ));
        }
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("catena", env!("CARGO_PKG_VERSION")))
            .with_instructions(instructions)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let call = ToolCallContext::new(self, request, context);
        self.tool_router.call(call).await
    }

    /// The tools that something answers here: the search tools only where the settings and
    /// indexes set them up (as the run form shows them), `run_python` marked as writing when the
    /// user made the workspace writable.
    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let service = self.shared.service.clone();
        let statuses = on_blocking_pool(move || Ok(service.tools())).await?;
        let writable = self
            .shared
            .options
            .workspace
            .as_ref()
            .is_some_and(|w| w.writable);
        let tools = self
            .tool_router
            .list_all()
            .into_iter()
            .filter(|tool| {
                statuses
                    .data
                    .iter()
                    .find(|status| status.tool.name() == tool.name)
                    .is_none_or(|status| status.ready)
            })
            .map(|tool| match tool.name.as_ref() {
                "run_python" if writable => writes(tool),
                _ => tool,
            })
            .collect();
        let hints = context
            .protocol_version()
            .is_some_and(|version| version >= ProtocolVersion::V_2026_07_28);
        Ok(ListToolsResult {
            result_type: Some(ResultType::COMPLETE),
            tools,
            meta: None,
            next_cursor: None,
            // Whether a search tool is set up can change with the settings: never cached.
            ttl_ms: hints.then_some(0),
            cache_scope: hints.then_some(CacheScope::Public),
        })
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tool_router.get(name).cloned()
    }
}

/// `tool` marked as one that changes the user's files.
fn writes(tool: Tool) -> Tool {
    let annotations = tool
        .annotations
        .clone()
        .unwrap_or_default()
        .read_only(false)
        .destructive(true);
    tool.with_annotations(annotations)
}

/// An agent tool's output as an MCP result: the observation text, an error when the tool did
/// not do what was asked.
fn tool_result(output: ToolOutput) -> CallToolResult {
    let content = vec![ContentBlock::text(output.observation)];
    if output.success {
        CallToolResult::success(content)
    } else {
        CallToolResult::error(content)
    }
}

/// A cancel flag that is raised when dropped: a program whose call was abandoned stops.
#[derive(Default)]
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}
