-- slurmtopo's job_submit/lua script (optional): the controller's side of the
-- #SLURMTOPO directive.
--
-- slurmctld runs this file as root (or SlurmUser) for every job submitted
-- (JobSubmitPlugins=lua; the file is job_submit.lua next to slurm.conf).
-- It runs no program and reads no file: a subprocess inside slurmctld would
-- stall every RPC behind it. Planning is the cli_filter hook's, on the submit
-- host, as the user. Here:
--  * a job without a directive is left alone (a search of its script's first
--    MiB for the word #SLURMTOPO, one look at its environment and comment);
--  * a directive that cannot be read (unknown options, options the site
--    sets, values out of range, characters no option takes) is rejected
--    with its reason, whichever host it came from: a submit host without the
--    cli_filter hook, or a script written to get past it;
--  * with hold_for_daemon, a job the cli_filter hook planned is held for the
--    placement daemon and tagged with its request (the SLURMTOPO_DAEMON_TAG
--    the hook put in its environment), so the daemon places every planned
--    job: the site's decision, made on the controller.
-- Written by `slurmtopo admin install-hooks --job-submit` (docs/admin.md,
-- "Slurm hooks"), which also writes the option table below from the
-- installed slurmtopo. Everything runs under pcall: an error in this file is
-- a line in slurmctld's log, never a rejected job. Lua 5.1 to 5.4.

-- @@SLURMTOPO CONFIG BEGIN@@
local CONFIG = {
  enabled = true,
  hold_for_daemon = false,
}
-- @@SLURMTOPO CONFIG END@@

-- the directive's options (install-hooks writes them from `slurmtopo sbatch`'s):
-- "flag" takes no value, "int" a whole number from 1 to 262144 ("int0": from
-- -1), "port" 1 to 65535, "choice:a|b" one of those, "text" a word of the
-- characters a plan option takes
-- @@SLURMTOPO OPTIONS BEGIN@@
local OPTIONS = {
  ["--tp"] = "int", ["--pp"] = "int", ["--dp"] = "int", ["--cp"] = "int", ["--ep"] = "int",
  ["--world"] = "int", ["--framework"] = "text", ["--require"] = "text",
  ["--prefer"] = "text", ["--launcher"] = "choice:srun|torchrun", ["--daemon"] = "flag",
}
-- @@SLURMTOPO OPTIONS END@@

local PREFIX = "#SLURMTOPO"
local MAX_BYTES = 4096
local MAX_WORDS = 256
local SCAN_BYTES = 1048576
local MAX_PLAN_BYTES = 98304
local MAX_TAG_BYTES = 16384

local function starts(s, prefix)
  return s ~= nil and string.sub(s, 1, string.len(prefix)) == prefix
end

local function is_directive(s)
  if not starts(s, PREFIX) then return false end
  local c = string.sub(s, string.len(PREFIX) + 1, string.len(PREFIX) + 1)
  return c == "" or c == " " or c == "\t" or c == "\r"
end

-- the directive's texts: (text, where) pairs
local function directive_texts(job_desc)
  local out = {}
  local script = job_desc.script
  if script ~= nil and string.find(string.sub(script, 1, SCAN_BYTES), PREFIX, 1, true) then
    local n = 0
    for line in string.gmatch(string.sub(script, 1, SCAN_BYTES), "([^\n]*)\n?") do
      n = n + 1
      if is_directive(line) then
        out[#out + 1] = { string.sub(line, string.len(PREFIX) + 1), "script:" .. n }
      end
      if n > 100000 then break end
    end
  end
  if job_desc.script ~= nil then
    local env = job_desc.environment
    local value = env and env.SLURMTOPO_DIRECTIVE
    if value ~= nil and string.match(value, "%S") then
      if is_directive(value) then value = string.sub(value, string.len(PREFIX) + 1) end
      out[#out + 1] = { value, "$SLURMTOPO_DIRECTIVE" }
    end
  end
  local comment = job_desc.comment
  if is_directive(comment) then
    out[#out + 1] = { string.sub(comment, string.len(PREFIX) + 1), "--comment" }
  end
  return out
end

-- words as sbatch cuts an #SBATCH line: blanks separate, quotes group, a
-- backslash escapes, an unquoted # ends the line
local function split(text)
  local words, word, quote, i, n = {}, nil, nil, 1, string.len(text)
  while i <= n do
    local c = string.sub(text, i, i)
    if quote ~= nil then
      if c == quote then quote = nil else word = (word or "") .. c end
    elseif c == "\\" then
      i = i + 1
      word = (word or "") .. string.sub(text, i, i)
    elseif c == '"' or c == "'" then
      quote = c
      word = word or ""
    elseif c == "#" then
      break
    elseif c == " " or c == "\t" or c == "\r" then
      if word ~= nil then words[#words + 1] = word; word = nil end
    else
      word = (word or "") .. c
    end
    i = i + 1
  end
  if quote ~= nil then return nil, "unmatched " .. quote end
  if word ~= nil then words[#words + 1] = word end
  return words
end

local function check_value(name, kind, value)
  if value == nil then return name .. " needs a value" end
  if kind == "int" or kind == "int0" or kind == "port" then
    if not string.match(value, "^%-?%d+$") then
      return name .. " " .. string.sub(value, 1, 40) .. ": not a whole number"
    end
    local v, lo, hi = tonumber(value), 1, 262144
    if kind == "int0" then lo = -1 end
    if kind == "port" then hi = 65535 end
    if string.len(value) > 12 or v < lo or v > hi then
      return name .. " " .. string.sub(value, 1, 40) .. ": out of range (" .. lo .. " to " ..
             hi .. ")"
    end
  elseif starts(kind, "choice:") then
    for choice in string.gmatch(string.sub(kind, 8), "[^|]+") do
      if value == choice then return nil end
    end
    return name .. " " .. value .. ": one of " .. string.gsub(string.sub(kind, 8), "|", ", ")
  else
    if string.len(value) > 1024 or not string.match(value, "^[%w%._:/=,@+ %-]*$") then
      return name .. ": " .. string.sub(value, 1, 40) .. " holds characters no plan " ..
             "option takes"
    end
    if string.find("/" .. value .. "/", "/../", 1, true) then
      return name .. ": " .. string.sub(value, 1, 40) .. ": a path with .. is not taken"
    end
  end
  return nil
end

-- nil when the directive reads, else why not
local function directive_problem(texts)
  local size, words, where = 0, {}, {}
  for _, t in ipairs(texts) do
    size = size + string.len(t[1])
    if string.find(t[1], "[\1-\8\10-\31\127]") or string.find(t[1], "\0", 1, true) then
      return t[2] .. ": the directive contains a control character"
    end
    local got, err = split(t[1])
    if got == nil then return t[2] .. ": " .. err end
    for _, w in ipairs(got) do words[#words + 1] = w; where[#where + 1] = t[2] end
  end
  if size > MAX_BYTES then return "the directive is " .. size .. " bytes; at most " .. MAX_BYTES end
  if #words > MAX_WORDS then return "the directive has " .. #words .. " words" end
  local i = 1
  while i <= #words do
    local w = words[i]
    local name, value = string.match(w, "^(%-%-[^=]+)=(.*)$")
    if name == nil then name = w end
    local kind = OPTIONS[name]
    local at = where[i]
    if kind == nil then
      return at .. ": " .. string.sub(name, 1, 40) .. " is not an option a " ..
             "directive takes (`slurmtopo sbatch --help` lists the planning options)"
    end
    if kind == "flag" then
      if value ~= nil then return at .. ": " .. name .. " takes no value" end
    else
      if value == nil then i = i + 1; value = words[i] end
      local problem = check_value(name, kind, value)
      if problem ~= nil then return at .. ": " .. problem end
    end
    i = i + 1
  end
  return nil
end

local function decode(text)
  return (string.gsub(text, "%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end))
end

local function check(job_desc, submit_uid)
  if not CONFIG.enabled then return slurm.SUCCESS end
  local texts = directive_texts(job_desc)
  if #texts == 0 then return slurm.SUCCESS end
  local problem = directive_problem(texts)
  if problem ~= nil then
    slurm.log_user("%s", "slurmtopo: " .. problem)
    return slurm.ERROR
  end
  local env = job_desc.environment
  local plan = env and env.SLURMTOPO_PLAN
  if plan ~= nil then
    if string.len(plan) > MAX_PLAN_BYTES or not string.match(plan, "^z1:[%w_%-]+$") then
      slurm.log_user("%s", "slurmtopo: SLURMTOPO_PLAN is not a plan the hooks wrote")
      return slurm.ERROR
    end
    local tag = env.SLURMTOPO_DAEMON_TAG
    if CONFIG.hold_for_daemon and tag ~= nil then
      tag = decode(tag)
      if string.len(tag) > MAX_TAG_BYTES or not starts(tag, "slurmtopo:v1:")
          or string.find(tag, "[\1-\31\127]") or string.find(tag, "\0", 1, true) then
        slurm.log_user("%s", "slurmtopo: SLURMTOPO_DAEMON_TAG is not a placement daemon request")
        return slurm.ERROR
      end
      local comment = job_desc.comment
      if comment == nil or comment == "" or is_directive(comment) then
        job_desc.comment = tag
        job_desc.priority = 0
        slurm.log_user("%s", "slurmtopo: held for the placement daemon")
      end
    end
  end
  return slurm.SUCCESS
end

function slurm_job_submit(job_desc, part_list, submit_uid)
  local ok, rc = pcall(check, job_desc, submit_uid)
  if not ok then
    slurm.log_error("%s", "slurmtopo job_submit.lua: " .. tostring(rc))
    return slurm.SUCCESS
  end
  return rc
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  return slurm.SUCCESS
end
