-- slurmtopo's cli_filter/lua script: plain sbatch plans a job that carries a
-- #SLURMTOPO directive the way `slurmtopo sbatch` plans it.
--
-- Slurm runs this file inside sbatch, srun and salloc on the submit host, as
-- the submitting user (CliFilterPlugins=cli_filter/lua; the file is
-- cli_filter.lua next to slurm.conf). Written by `slurmtopo admin
-- install-hooks` (docs/admin.md, "Slurm hooks"); to merge it into a
-- cli_filter.lua of your own, call slurmtopo_pre_submit(options, offset) and
-- slurmtopo_setup_defaults(options, early) from your functions.
--
-- What it does:
--  * a job without a directive is not touched: the only work is reading the
--    script's first MiB for the word #SLURMTOPO and one getenv;
--  * a job with one (a "#SLURMTOPO ..." line after the script's first
--    command, $SLURMTOPO_DIRECTIVE, or --comment='#SLURMTOPO ...') gets its
--    options from `slurmtopo hooks plan`, bounded by timeout(1): nodes, tasks,
--    GPUs, --switches/--segment, the hold for the placement daemon, and the
--    plan in the job's environment (--export=...,SLURMTOPO_PLAN=...);
--  * a planning failure (no inventory, a bug, a timeout) never stops the
--    submission: the job goes in unchanged with one warning line;
--  * a directive that cannot be read is refused with its reason (or, with
--    on_bad_directive = "warn", the job goes in unplanned);
--  * inside a planned job, `srun torchrun` with a rendezvous that numbers
--    nodes in join order (c10d, etcd) is refused: the ranks would not be
--    the plan's.
-- Everything runs under pcall: an error in this file is one warning line,
-- never a failed submission. Lua 5.1 to 5.4 (Debian's 22.05 embeds 5.1).

-- @@SLURMTOPO CONFIG BEGIN@@
local CONFIG = {
  enabled = true,                         -- false: every job is left alone
  command = "slurmtopo",                  -- slurmtopo's path on the submit hosts
  inventory = "/etc/slurmtopo/cluster.json",
  state = "live",                         -- live | none | a state file
  extra_args = {},                        -- more `slurmtopo hooks plan` options
  timeout = 5,                            -- seconds the planning call may take
  timeout_command = "timeout",            -- coreutils timeout(1)
  on_bad_directive = "refuse",            -- refuse | warn
  notes = true,                           -- print the one-line plan summary
}
-- @@SLURMTOPO CONFIG END@@

local PREFIX = "#SLURMTOPO"
local PROTOCOL = "slurmtopo-hook 1"
local SCAN_BYTES = 1048576
-- the options the planning call may set (anything else it printed is ignored)
local SETTABLE = {
  ["nodes"] = true, ["ntasks"] = true, ["ntasks-per-node"] = true,
  ["gpus-per-node"] = true, ["gpus-per-task"] = true, ["gpus"] = true, ["gres"] = true,
  ["switches"] = true, ["segment"] = true, ["consolidate-segments"] = true,
  ["spread-segments"] = true, ["network"] = true, ["hold"] = true, ["comment"] = true,
  ["export"] = true,
}

local function say(kind, text)
  io.stderr:write("slurmtopo: " .. kind .. text .. "\n")
end

local function quote(s)
  return "'" .. (string.gsub(tostring(s), "'", "'\\''")) .. "'"
end

local function starts(s, prefix)
  return s ~= nil and string.sub(s, 1, string.len(prefix)) == prefix
end

-- the word after PREFIX must end there or be followed by a blank
local function is_directive(s)
  if not starts(s, PREFIX) then return false end
  local c = string.sub(s, string.len(PREFIX) + 1, string.len(PREFIX) + 1)
  return c == "" or c == " " or c == "\t"
end

local function read_head(path)
  if path == nil or path == "" then return nil end
  -- sbatch has read the script already: a pipe (/dev/stdin, <(...) as
  -- /dev/fd/N) is at its end, or would wait for a writer; never reopened
  if starts(path, "/dev/") or starts(path, "/proc/") then return nil end
  local f = io.open(path, "r")
  if f == nil then return nil end
  local text = f:read(SCAN_BYTES)
  f:close()
  return text
end

local function script_path(options)
  if options.type ~= "sbatch" then return nil end
  local ok, wrap = pcall(function() return options.wrap end)
  if ok and wrap ~= nil and wrap ~= "" then return nil end
  local argv = options.argv
  if argv == nil then return nil end
  return argv[1]
end

-- a #SLURMTOPO line among the lines sbatch reads as its own directives
-- (every header line starting with #SLURM: the old spelling of #SBATCH)
local function header_directive(text)
  local n = 0
  for line in string.gmatch(text, "([^\n]*)\n?") do
    n = n + 1
    if starts(line, PREFIX) then return n end
    local rest = string.match(line, "^%s*(.-)$")
    if rest ~= "" and string.sub(rest, 1, 1) ~= "#" then return nil end
    if n > 10000 then return nil end
  end
  return nil
end

local function has_directive(options, text)
  local env = os.getenv("SLURMTOPO_DIRECTIVE")
  if env ~= nil and string.match(env, "%S") then return true end
  local ok, comment = pcall(function() return options.comment end)
  if ok and is_directive(comment) then return true end
  if text ~= nil then
    if starts(text, PREFIX) then return true end
    if string.find(text, "\n" .. PREFIX, 1, true) then return true end
  end
  return false
end

local function planning_command(options)
  local json = nil
  if slurm.json_cli_options ~= nil then json = slurm.json_cli_options(options) end
  if json == nil then return nil end
  local args = { "SLURMTOPO_HOOK_ACTIVE=1", "exec", CONFIG.timeout_command, "-k", "1",
                 tostring(CONFIG.timeout), quote(CONFIG.command), "hooks", "plan",
                 "--inventory", quote(CONFIG.inventory), "--state", quote(CONFIG.state),
                 "--deadline", tostring(math.max(CONFIG.timeout - 0.5, 0.5)),
                 "--kind", quote(options.type), "--options", quote(json) }
  for _, a in ipairs(CONFIG.extra_args) do args[#args + 1] = quote(a) end
  return table.concat(args, " ") .. " 2>/dev/null </dev/null"
end

-- the planning call's answer: ("set", {{name, value}...}, notes) when it
-- planned; ("error", text) for a bad directive; ("warning", text) otherwise
local function read_answer(out)
  if out == nil or out == "" then return "warning", "no answer (timed out or not installed?)" end
  local lines = {}
  for line in string.gmatch(out, "([^\n]*)\n") do lines[#lines + 1] = line end
  if lines[1] ~= PROTOCOL then return "warning", "an answer it does not understand" end
  local sets, notes = {}, {}
  for i = 2, #lines do
    local kind, rest = string.match(lines[i], "^(%a+)\t?(.*)$")
    if kind == "error" or kind == "warning" then return kind, rest end
    if kind == "set" then
      local name, value = string.match(rest, "^([^\t]+)\t(.*)$")
      if name == nil or not SETTABLE[name] then
        return "warning", "an option it may not set (" .. tostring(name) .. ")"
      end
      sets[#sets + 1] = { name, value }
    elseif kind == "note" then
      notes[#notes + 1] = rest
    elseif kind == "done" then
      return "set", sets, notes
    end
  end
  return "warning", "an answer cut short (timed out?)"
end

function slurmtopo_setup_defaults(options, early_pass)
  if not CONFIG.enabled or early_pass or options.type ~= "sbatch" then return slurm.SUCCESS end
  -- sbatch reads a #SLURMTOPO line in the header as "#SLURM TOPO ..." and
  -- fails before pre_submit with "Invalid directive found in batch script:
  -- TOPO": say why instead
  local text = read_head(script_path(options))
  if text == nil or not string.find(text, PREFIX, 1, true) then return slurm.SUCCESS end
  local n = header_directive(text)
  if n ~= nil then
    say("error: ", script_path(options) .. ":" .. n .. ": sbatch reads " .. PREFIX ..
        " lines before the script's first command as its own #SLURM directives; move the " ..
        "line below the first command (after `set -e`, for instance)")
    return slurm.ERROR
  end
  return slurm.SUCCESS
end

-- `srun torchrun ...` inside a planned job: refused when its rendezvous
-- would number the nodes otherwise than the plan
local function torchrun_problem(options)
  local argv = options.argv
  if argv == nil or argv[1] == nil then return nil end
  local i = 1
  local base = string.match(argv[1], "([^/]+)$") or argv[1]
  if string.match(base, "^python[%d%.]*$") then
    if argv[2] ~= "-m" or (argv[3] ~= "torch.distributed.run" and
                           argv[3] ~= "torch.distributed.launch") then return nil end
    i = 3
  elseif base ~= "torchrun" then
    return nil
  end
  local env_backend = os.getenv("PET_RDZV_BACKEND")
  local backend = nil
  if env_backend ~= nil and env_backend ~= "" then backend = env_backend end
  local standalone = false
  local j = i + 1
  while argv[j] ~= nil do
    local word = argv[j]
    if not starts(word, "-") then break end
    local name, value = string.match(word, "^(%-%-[^=]+)=(.*)$")
    if name == nil then name = word end
    if starts(name, "--rdzv-b") or starts(name, "--rdzv_b") then
      if value == nil then j = j + 1; value = argv[j] end
      backend = value
    elseif name == "--standalone" then
      standalone = true
    elseif starts(name, "--node-r") or starts(name, "--node_r") then
      return "--node-rank is given on the command line, the same on every node; drop it " ..
             "(slurmtopo gives each node its rank through PET_NODE_RANK)"
    end
    j = j + 1
  end
  local nnodes = tonumber(os.getenv("SLURMTOPO_NNODES") or "") or 0
  if backend ~= nil and backend ~= "static" then
    return "--rdzv-backend=" .. backend .. " numbers the nodes in the order they join, " ..
           "not the plan's; drop --rdzv-backend/--rdzv-endpoint: each node gets the plan's " ..
           "--node-rank, --master-addr and --master-port through PET_* variables (a static " ..
           "rendezvous)"
  end
  if standalone and nnodes > 1 then
    return "--standalone starts a rendezvous on every node alone; drop it (the job runs " ..
           "on " .. nnodes .. " nodes)"
  end
  return nil
end

function slurmtopo_pre_submit(options, offset)
  if not CONFIG.enabled or os.getenv("SLURMTOPO_HOOK_ACTIVE") ~= nil then
    return slurm.SUCCESS
  end
  local kind = options.type
  if kind == "srun" and os.getenv("SLURM_JOB_ID") ~= nil then
    -- a step of a job: nothing to plan; check a torchrun launch of a planned job
    local planned = os.getenv("SLURMTOPO_JOB_PLAN") or os.getenv("SLURMTOPO_PLAN")
    if planned == nil then return slurm.SUCCESS end
    local problem = torchrun_problem(options)
    if problem ~= nil then
      say("error: ", "srun torchrun: " .. problem)
      return slurm.ERROR
    end
    return slurm.SUCCESS
  end
  if kind ~= "sbatch" and kind ~= "srun" then
    if has_directive(options, nil) then
      say("warning: ", kind .. " does not carry a plan to its steps; the job is not " ..
          "planned (submit it with sbatch)")
    end
    return slurm.SUCCESS
  end
  local text = read_head(script_path(options))
  if not has_directive(options, text) then return slurm.SUCCESS end
  local cmd = planning_command(options)
  if cmd == nil then
    say("warning: ", "this Slurm's cli_filter/lua has no json_cli_options; the job goes " ..
        "in unplanned")
    return slurm.SUCCESS
  end
  local pipe = io.popen(cmd, "r")
  if pipe == nil then
    say("warning: ", "could not run " .. CONFIG.command .. "; the job goes in unplanned")
    return slurm.SUCCESS
  end
  local out = pipe:read("*a")
  pipe:close()
  local result, sets, notes = read_answer(out)
  if result == "error" then
    if CONFIG.on_bad_directive == "warn" then
      say("warning: ", sets .. " (the job goes in unplanned)")
      return slurm.SUCCESS
    end
    say("error: ", sets)
    return slurm.ERROR
  end
  if result ~= "set" then
    say("warning: ", "the job goes in unplanned: " .. tostring(sets))
    return slurm.SUCCESS
  end
  for _, kv in ipairs(sets) do
    options[kv[1]] = kv[2]
  end
  if CONFIG.notes then
    for _, note in ipairs(notes) do say("", note) end
  end
  return slurm.SUCCESS
end

local function guarded(fn, ...)
  local ok, rc = pcall(fn, ...)
  if not ok then
    say("warning: ", "cli_filter.lua: " .. tostring(rc) .. " (the job is left as it was)")
    return slurm.SUCCESS
  end
  return rc
end

function slurm_cli_setup_defaults(options, early_pass)
  return guarded(slurmtopo_setup_defaults, options, early_pass)
end

function slurm_cli_pre_submit(options, offset)
  return guarded(slurmtopo_pre_submit, options, offset)
end

function slurm_cli_post_submit(offset, job_id, step_id)
  return slurm.SUCCESS
end
