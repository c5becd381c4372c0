//! Every diagnostic code, one variant each. A diagnostic is made from a [`Code`], so the
//! list is complete by construction, and the fixture test walks it: every code has a
//! fixture.

use std::fmt;

use serde::Serialize;

macro_rules! codes {
    ($($variant:ident = $text:literal,)*) => {
        /// A stable diagnostic code such as `rondo::route::unknown_target`.
        #[derive(Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Code {
            $($variant,)*
        }

        impl Code {
            /// Every code, in the order of their text.
            pub const ALL: &[Code] = &[$(Code::$variant,)*];

            pub fn as_str(self) -> &'static str {
                match self {
                    $(Code::$variant => $text,)*
                }
            }
        }
    };
}

codes! {
    ArtifactBadName = "rondo::artifact::bad_name",
    ArtifactOutsideWorkspace = "rondo::artifact::outside_workspace",
    AttrDuplicate = "rondo::attr::duplicate",
    AttrUnknown = "rondo::attr::unknown",
    AttrWrongKind = "rondo::attr::wrong_kind",
    CostOverBudget = "rondo::cost::over_budget",
    CostUnbounded = "rondo::cost::unbounded",
    EnvMissingKey = "rondo::env::missing_key",
    EnvironmentBadMount = "rondo::environment::bad_mount",
    EnvironmentDockerOnly = "rondo::environment::docker_only",
    EnvironmentDockerSocket = "rondo::environment::docker_socket",
    EnvironmentHostMount = "rondo::environment::host_mount",
    EnvironmentHidesImage = "rondo::environment::hides_image",
    EnvironmentNoImage = "rondo::environment::no_image",
    EnvironmentUnknown = "rondo::environment::unknown",
    EnvironmentUnknownKind = "rondo::environment::unknown_kind",
    EvalBadCase = "rondo::eval::bad_case",
    EvalBadRubrics = "rondo::eval::bad_rubrics",
    ExitCodeOutOfRange = "rondo::exit::code_out_of_range",
    ExitReservedCode = "rondo::exit::reserved_code",
    ExitSharedCode = "rondo::exit::shared_code",
    ExprArity = "rondo::expr::arity",
    ExprBadArgument = "rondo::expr::bad_argument",
    ExprBadRegex = "rondo::expr::bad_regex",
    ExprBareNamespace = "rondo::expr::bare_namespace",
    ExprIncomparable = "rondo::expr::incomparable",
    ExprItemOutsideMap = "rondo::expr::item_outside_map",
    ExprLiteralOutsideUnion = "rondo::expr::literal_outside_union",
    ExprMayNotHaveRun = "rondo::expr::may_not_have_run",
    ExprNotBool = "rondo::expr::not_bool",
    ExprNotConstant = "rondo::expr::not_constant",
    ExprOptionalOperand = "rondo::expr::optional_operand",
    ExprOutputOutsideRole = "rondo::expr::output_outside_role",
    ExprPathOutsideWorkspace = "rondo::expr::path_outside_workspace",
    ExprTypeMismatch = "rondo::expr::type_mismatch",
    ExprUnknownField = "rondo::expr::unknown_field",
    ExprUnknownFunction = "rondo::expr::unknown_function",
    ExprUnknownInput = "rondo::expr::unknown_input",
    ExprUnknownName = "rondo::expr::unknown_name",
    ExprUnknownRole = "rondo::expr::unknown_role",
    FileNotUtf8 = "rondo::file::not_utf8",
    GraphExitNeverReached = "rondo::graph::exit_never_reached",
    GraphNoExit = "rondo::graph::no_exit",
    GraphNoStart = "rondo::graph::no_start",
    GraphUnreachableRole = "rondo::graph::unreachable_role",
    ImportBadField = "rondo::import::bad_field",
    ImportBadYaml = "rondo::import::bad_yaml",
    ImportMissing = "rondo::import::missing",
    InputBadDefault = "rondo::input::bad_default",
    InputBadEnv = "rondo::input::bad_env",
    InputSecretEnv = "rondo::input::secret_env",
    InputStringPath = "rondo::input::string_path",
    LoopUnbounded = "rondo::loop::unbounded",
    MemoryBadBound = "rondo::memory::bad_bound",
    MemoryBadDefault = "rondo::memory::bad_default",
    MemoryBadGamma = "rondo::memory::bad_gamma",
    MemoryCannotCreate = "rondo::memory::cannot_create",
    MemoryNoSections = "rondo::memory::no_sections",
    MemoryRootOutsideWorkspace = "rondo::memory::root_outside_workspace",
    MemoryUnknown = "rondo::memory::unknown",
    NameDuplicate = "rondo::name::duplicate",
    NameReserved = "rondo::name::reserved",
    ProviderBadStream = "rondo::provider::bad_stream",
    ProviderNoKind = "rondo::provider::no_kind",
    ProviderNoModel = "rondo::provider::no_model",
    ProviderSelfFallback = "rondo::provider::self_fallback",
    ProviderUnknown = "rondo::provider::unknown",
    ProviderUnknownKind = "rondo::provider::unknown_kind",
    ProviderZeroLimit = "rondo::provider::zero_limit",
    RoleBadCall = "rondo::role::bad_call",
    RoleBadCalls = "rondo::role::bad_calls",
    RoleBadDemos = "rondo::role::bad_demos",
    RoleBadMaxVisits = "rondo::role::bad_max_visits",
    RoleBadMode = "rondo::role::bad_mode",
    RoleBadShow = "rondo::role::bad_show",
    RoleDuplicateOutput = "rondo::role::duplicate_output",
    RoleEmptyBuiltin = "rondo::role::empty_builtin",
    RoleEmptyCommand = "rondo::role::empty_command",
    RoleNativeNeeds = "rondo::role::native_needs",
    RoleNoAction = "rondo::role::no_action",
    RoleNoChoices = "rondo::role::no_choices",
    RoleNoPrompt = "rondo::role::no_prompt",
    RoleNotConversation = "rondo::role::not_conversation",
    RoleOutputOnNonLlm = "rondo::role::output_on_non_llm",
    RoleReservedOutputField = "rondo::role::reserved_output_field",
    RoleTaggedOutputNotObject = "rondo::role::tagged_output_not_object",
    RoleUnknownCoercion = "rondo::role::unknown_coercion",
    RoleUnknownInput = "rondo::role::unknown_input",
    RoleUnknownKind = "rondo::role::unknown_kind",
    RoleZeroVisits = "rondo::role::zero_visits",
    RouteBadBound = "rondo::route::bad_bound",
    RouteBranchHasRoutes = "rondo::route::branch_has_routes",
    RouteBranchReused = "rondo::route::branch_reused",
    RouteDeadEnd = "rondo::route::dead_end",
    RouteFromExit = "rondo::route::from_exit",
    RouteInvalidNotRouted = "rondo::route::invalid_not_routed",
    RouteMapNotList = "rondo::route::map_not_list",
    RouteNeverTaken = "rondo::route::never_taken",
    RouteNonExhaustive = "rondo::route::non_exhaustive",
    RouteToStart = "rondo::route::to_start",
    RouteTwoConditions = "rondo::route::two_conditions",
    RouteUnknownTarget = "rondo::route::unknown_target",
    SwebenchBadInstance = "rondo::swebench::bad_instance",
    SyntaxCOperator = "rondo::syntax::c_operator",
    SyntaxColonAttribute = "rondo::syntax::colon_attribute",
    SyntaxExpression = "rondo::syntax::expression",
    SyntaxInvalidLine = "rondo::syntax::invalid_line",
    SyntaxIsOperator = "rondo::syntax::is_operator",
    SyntaxNumberTooLarge = "rondo::syntax::number_too_large",
    SyntaxPythonKeyword = "rondo::syntax::python_keyword",
    SyntaxPythonLiteral = "rondo::syntax::python_literal",
    SyntaxSingleEquals = "rondo::syntax::single_equals",
    SyntaxSingleQuote = "rondo::syntax::single_quote",
    SyntaxTooDeep = "rondo::syntax::too_deep",
    SyntaxUnclosedBlock = "rondo::syntax::unclosed_block",
    SyntaxUnclosedComment = "rondo::syntax::unclosed_comment",
    SyntaxUnexpected = "rondo::syntax::unexpected",
    TemplateFilterInput = "rondo::template::filter_input",
    TemplateLoopTarget = "rondo::template::loop_target",
    TemplateMayNotHaveRun = "rondo::template::may_not_have_run",
    TemplateMaybeNull = "rondo::template::maybe_null",
    TemplateMemoryNotRead = "rondo::template::memory_not_read",
    TemplateMissing = "rondo::template::missing",
    TemplateOperand = "rondo::template::operand",
    TemplateParse = "rondo::template::parse",
    TemplateTooDeep = "rondo::template::too_deep",
    TemplateUnknownField = "rondo::template::unknown_field",
    TemplateUnknownFilter = "rondo::template::unknown_filter",
    TemplateUnknownInput = "rondo::template::unknown_input",
    TemplateUnknownMemory = "rondo::template::unknown_memory",
    TemplateUnknownVariable = "rondo::template::unknown_variable",
    TestBadInput = "rondo::test::bad_input",
    TestDuplicate = "rondo::test::duplicate",
    TestNotAnExit = "rondo::test::not_an_exit",
    TestReplyNotLlm = "rondo::test::reply_not_llm",
    TestUnknownInput = "rondo::test::unknown_input",
    TestUnknownName = "rondo::test::unknown_name",
    ToolBadCapability = "rondo::tool::bad_capability",
    ToolBadExtraFields = "rondo::tool::bad_extra_fields",
    ToolBadInstallation = "rondo::tool::bad_installation",
    ToolBadPython = "rondo::tool::bad_python",
    ToolBadSchema = "rondo::tool::bad_schema",
    ToolBadSetupScript = "rondo::tool::bad_setup_script",
    ToolNameMismatch = "rondo::tool::name_mismatch",
    ToolNoExecutable = "rondo::tool::no_executable",
    ToolNoInstallation = "rondo::tool::no_installation",
    ToolNoName = "rondo::tool::no_name",
    ToolPipWithoutPackage = "rondo::tool::pip_without_package",
    ToolSchemaInFile = "rondo::tool::schema_in_file",
    ToolSourceMissing = "rondo::tool::source_missing",
    ToolTooManyPlugins = "rondo::tool::too_many_plugins",
    ToolUnknown = "rondo::tool::unknown",
    ToolUnknownField = "rondo::tool::unknown_field",
    ToolZeroTimeout = "rondo::tool::zero_timeout",
    TypeBadExtra = "rondo::type::bad_extra",
    TypeDuplicateField = "rondo::type::duplicate_field",
    TypeRecursive = "rondo::type::recursive",
    TypeTooDeep = "rondo::type::too_deep",
    TypeUnknown = "rondo::type::unknown",
    UpdateArity = "rondo::update::arity",
    UpdateOptionalValue = "rondo::update::optional_value",
    UpdateSetStructured = "rondo::update::set_structured",
    UpdateTypeMismatch = "rondo::update::type_mismatch",
    UpdateUnknownField = "rondo::update::unknown_field",
    UpdateUnknownOp = "rondo::update::unknown_op",
    WorkflowBadBudget = "rondo::workflow::bad_budget",
    WorkflowBadScript = "rondo::workflow::bad_script",
    WorkflowDuplicate = "rondo::workflow::duplicate",
    WorkflowEmpty = "rondo::workflow::empty",
    WorkflowFinallyNotBuiltin = "rondo::workflow::finally_not_builtin",
    WorkflowFinallyRouted = "rondo::workflow::finally_routed",
    WorkflowNotDurable = "rondo::workflow::not_durable",
    WorkflowPromptsMissing = "rondo::workflow::prompts_missing",
    WorkflowScriptMissing = "rondo::workflow::script_missing",
    WorkflowScriptUnknownRole = "rondo::workflow::script_unknown_role",
    WorkflowUnknownFinallyRole = "rondo::workflow::unknown_finally_role",
    WorkflowUnknownRoundRole = "rondo::workflow::unknown_round_role",
}

impl Code {
    /// Diagnostics of these codes with the same message are one fault met in several
    /// places (an undeclared name used five times): they are reported once, each place
    /// labelled.
    pub fn merges_uses(self) -> bool {
        matches!(
            self,
            Code::RouteUnknownTarget
                | Code::ExprUnknownField
                | Code::ExprUnknownName
                | Code::ExprUnknownInput
                | Code::ExprUnknownRole
                | Code::ExprUnknownFunction
                | Code::MemoryUnknown
                | Code::TypeUnknown
                | Code::ToolUnknown
                | Code::ProviderUnknown
                | Code::EnvironmentUnknown
                | Code::TestUnknownInput
                | Code::TestUnknownName
                | Code::UpdateUnknownField
                | Code::TemplateUnknownVariable
                | Code::TemplateUnknownField
                | Code::TemplateUnknownInput
                | Code::TemplateUnknownMemory
                | Code::TemplateUnknownFilter
                | Code::TemplateMemoryNotRead
                | Code::RoleNotConversation
        )
    }
}

impl std::ops::Deref for Code {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl Ord for Code {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl PartialOrd for Code {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq<str> for Code {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Code {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for Code {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl Serialize for Code {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}
