--
-- Ansible managed
--
-- Whole-node jobs and GPU limits (roles/slurm/README.md "Limits"). An exclusive job (--exclusive, or a partition
-- with OverSubscribe=EXCLUSIVE) is given every GPU of its nodes, asked for or not, and Slurm counts them against the
-- QOS and association GPU limits only when it schedules the job: one that can never fit would pend forever. This
-- script writes the whole node's GPUs into the request (--gres=gpu:<GPUs per node> and the nodes its tasks need at
-- least), so that Slurm's own check at submit (QOS Flags=DenyOnLimit) compares them with the user's limits as they
-- are in slurmdbd and refuses the job with the limit's name. It changes nothing else and refuses nothing itself.

-- GPUs per node (the fewest of the partition's node groups) and CPUs per node (the most; 0: not known).
local PARTITIONS = {
  ["interactive"] = {gpus = 2, cpus = 2},
  ["batch"] = {gpus = 2, cpus = 2},
}
local DEFAULT_PARTITION = "interactive"
local NO_VAL = 4294967294
local NO_VAL16 = 65534
local SHARED_NONE = 0   -- job_desc.shared of --exclusive; 2 (user), 3 (mcs), 4 (topo) share the node

-- A number Slurm left unset (NO_VAL, INFINITE) or zero is nil.
local function given(value, unset)
  if value == nil or value <= 0 or value >= unset then return nil end
  return value
end

-- GPUs per node a gres string asks for: "gres:gpu:2", "gres/gpu:a100:2" (24.11), "gpu" (1).
local function gpus_in(tres)
  local total = 0
  for spec in string.gmatch(tres or "", "[^,]+") do
    local name = string.gsub(spec, "^gres[:/]", "")
    if string.match(name, "^gpu$") or string.match(name, "^gpu:") then
      total = total + (tonumber(string.match(name, ":(%d+)$")) or 1)
    end
  end
  return total
end

-- The nodes a job needs at least: what it asks for, and what its tasks need on the biggest nodes of the partition.
local function nodes_needed(job, part)
  local nodes = given(job.min_nodes, NO_VAL) or 1
  local tasks = given(job.num_tasks, NO_VAL) or 1
  local cpus = math.max(given(job.min_cpus, NO_VAL) or 1, tasks * (given(job.cpus_per_task, NO_VAL16) or 1))
  if part.cpus > 0 then nodes = math.max(nodes, math.ceil(cpus / part.cpus)) end
  local per_node = given(job.ntasks_per_node, NO_VAL16)
  if per_node then nodes = math.max(nodes, math.ceil(tasks / per_node)) end
  return nodes
end

-- The partition the job runs in, if it names one Carme knows (several: the one with the fewest GPUs per node).
local function partition_of(job, part_list)
  local chosen, name_of = nil, nil
  for name in string.gmatch(job.partition or DEFAULT_PARTITION, "[^,]+") do
    local part = PARTITIONS[name]
    if part and (chosen == nil or part.gpus < chosen.gpus) then chosen, name_of = part, name end
  end
  if chosen == nil then return nil end
  local exclusive = job.shared == SHARED_NONE
  if job.shared == nil or job.shared >= NO_VAL16 then
    exclusive = part_list[name_of] ~= nil and part_list[name_of].max_share == 0   -- OverSubscribe=EXCLUSIVE
  end
  if exclusive and chosen.gpus > 0 then return chosen end
  return nil
end

-- tres with its GPU parts replaced by one that asks for n; prefix: "" where the setter adds "gres:" itself.
local function with_gpus(tres, n, prefix)
  local out = {}
  for spec in string.gmatch(tres or "", "[^,]+") do
    if gpus_in(spec) == 0 then table.insert(out, prefix == "" and (string.gsub(spec, "^gres[:/]", "")) or spec) end
  end
  table.insert(out, prefix .. "gpu:" .. n)
  return table.concat(out, ",")
end

function slurm_job_submit(job, part_list, submit_uid)
  local part = partition_of(job, part_list)
  -- GPUs per task or per socket: Slurm refuses them together with GPUs per node or per job; counted as asked
  if part == nil or gpus_in(job.tres_per_task) + gpus_in(job.tres_per_socket) > 0 then return slurm.SUCCESS end
  local nodes = nodes_needed(job, part)
  local per_job = gpus_in(job.tres_per_job)
  if per_job > 0 then   -- --gpus=N: Slurm refuses it together with GPUs per node, so the total is raised instead
    if per_job >= nodes * part.gpus then return slurm.SUCCESS end
    job.tres_per_job = with_gpus(job.tres_per_job, nodes * part.gpus, string.match(job.tres_per_job, "gres[:/]") or "")
  elseif gpus_in(job.tres_per_node) < part.gpus then
    job.gres = with_gpus(job.tres_per_node, part.gpus, "")
    job.min_nodes = nodes
  else
    return slurm.SUCCESS
  end
  slurm.log_user("a whole-node job (--exclusive) holds all %d GPUs of its %d node(s); " ..
                 "they count against your GPU limits", nodes * part.gpus, nodes)
  return slurm.SUCCESS
end

function slurm_job_modify(job, job_rec, part_list, modify_uid)
  return slurm.SUCCESS
end

return slurm.SUCCESS
