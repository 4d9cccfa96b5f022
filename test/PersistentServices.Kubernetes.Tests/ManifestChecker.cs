using System.Globalization;
using System.Text.RegularExpressions;
using k8s;
using k8s.Models;

namespace PersistentServices.Kubernetes.Tests;

/// <summary>One rule a manifest breaks.</summary>
internal sealed record Violation(string Object, string Rule, string Message)
{
    public override string ToString() => $"{Object}: [{Rule}] {Message}";
}

/// <summary>
/// What the application tells the manifests: the paths it maps for probes and metrics (the sample's
/// <c>OperationsPaths</c>), the port its image listens on unless told otherwise (the Containerfile's
/// <c>ASPNETCORE_HTTP_PORTS</c>), and the library's option defaults, for the log settings a manifest leaves alone.
/// </summary>
internal sealed record AppContract(string LivePath, string ReadyPath, string MetricsPath, int ImagePort, PersistentServicesOptions Defaults);

/// <summary>
/// The deployment rules of docs/operations.md ("Kubernetes") over every object <c>kubectl kustomize</c> rendered, each
/// broken rule a <see cref="Violation"/> naming the object and the rule:
/// <list type="bullet">
/// <item><c>probes</c>: a startup, a readiness and a liveness probe on HTTP, readiness on the app's readiness path and
/// liveness on its liveness path (two different endpoints), on the port the app listens on; readiness tolerates one slow
/// answer, liveness gives a faulted log 30 s, startup allows two minutes of recovery.</item>
/// <item><c>grace-period</c>: <c>terminationGracePeriodSeconds</c> &gt; the drain (<c>DOTNET_SHUTDOWNTIMEOUTSECONDS</c>,
/// 30 s when unset) + the preStop sleep; <c>prestop</c>: a preStop sleep of 1–10 s.</item>
/// <item><c>log-volume</c>: the log directory on a volume whose size (the claim, or an emptyDir's <c>sizeLimit</c>) holds
/// the log's worst case within 80 % (<see cref="LogWorstCaseBytes"/>).</item>
/// <item><c>resources</c>: CPU and memory requests, a memory limit no lower than the request.</item>
/// <item><c>restricted</c>: the "restricted" Pod Security Standard (non-root, no privilege escalation, every capability
/// dropped, RuntimeDefault seccomp, no host namespaces, ports or paths) and a read-only root file system with /tmp
/// on an emptyDir; <c>namespace</c>: the namespace enforces "restricted".</item>
/// <item><c>peer-key</c>: the peer key (and any key accepted besides it) from a Secret, never a value in a manifest; <c>image</c>: a tagged image (not
/// <c>latest</c>) with an explicit pull policy; <c>metrics</c>: Prometheus scrape annotations naming the app's metrics
/// path and port.</item>
/// <item><c>gateway</c>: a container configured as the gateway (<c>PersistentGateway__</c> variables) is given no log
/// directory and runs as a Deployment of two or more copies; the peer-key and log-volume rules are not its.</item>
/// <item><c>pdb</c>: a PodDisruptionBudget for every workload; <c>service</c>: every Service selects a workload and
/// targets one of its ports, a headless Service publishes not-ready addresses, a StatefulSet's service is headless.</item>
/// </list>
/// </summary>
internal sealed partial class ManifestChecker(AppContract app)
{
    /// <summary>The part of a volume the log may fill: ext4's defaults leave a non-root user 83 % of 256 MiB and 88 % of 1 GiB (journal, inode tables, 5 % reserved).</summary>
    public const double UsableFraction = 0.8;

    private const string ShutdownTimeoutVariable = "DOTNET_SHUTDOWNTIMEOUTSECONDS";
    private const int DefaultShutdownTimeoutSeconds = 30; // HostOptions.ShutdownTimeout
    private const long DefaultGracePeriodSeconds = 30;    // Kubernetes' default terminationGracePeriodSeconds

    private static readonly HashSet<string> RestrictedVolumeTypes =
        ["ConfigMap", "Csi", "DownwardAPI", "EmptyDir", "Ephemeral", "PersistentVolumeClaim", "Projected", "Secret"];

    /// <summary>
    /// The most disk the log takes (docs/operations.md, "Sizing the log volume"): the records of
    /// <c>IdleCheckpointAfter + 1</c> service-checkpoint periods of <c>ServiceCheckpointLogBytes</c> and one more period
    /// for the checkpoints' lateness (each is taken at the first 1 s poll after its threshold, and truncation follows
    /// it), one segment file that truncation keeps whole, and up to twice <c>Log.ZeroFillBytes</c> of zeros ahead of the
    /// tail.
    /// </summary>
    public static long LogWorstCaseBytes(int idleCheckpointAfter, long serviceCheckpointLogBytes, int segmentSizeBits, int zeroFillBytes)
        => ((idleCheckpointAfter + 2L) * serviceCheckpointLogBytes) + (1L << segmentSizeBits) + (2L * zeroFillBytes);

    public IReadOnlyList<Violation> Check(IReadOnlyList<IKubernetesObject<V1ObjectMeta>> objects)
    {
        var violations = new List<Violation>();
        var workloads = objects.Select(Workload.From).OfType<Workload>().ToList();
        var configMaps = objects.OfType<V1ConfigMap>().ToList();
        var services = objects.OfType<V1Service>().ToList();
        var budgets = objects.OfType<V1PodDisruptionBudget>().ToList();

        CheckNamespaces(objects, violations);
        foreach (var other in objects.Where(o => o is V1Pod or V1ReplicaSet or V1DaemonSet or V1Job or V1CronJob))
        {
            violations.Add(new Violation($"{other.Kind} {other.Namespace()}/{other.Name()}", "workload", "a kind of workload these rules do not check (StatefulSet and Deployment only)"));
        }

        foreach (var workload in workloads)
        {
            void Add(string rule, string message) => violations.Add(new Violation(workload.Id, rule, message));
            var pod = workload.Template.Spec;
            CheckPodSecurity(pod, Add);
            if (!budgets.Any(b => b.Namespace() == workload.Namespace && Selects(b.Spec.Selector, workload.Labels)))
            {
                Add("pdb", "no PodDisruptionBudget selects its pods");
            }

            if (workload.ServiceName is { } serviceName
                && !services.Any(s => s.Name() == serviceName && s.Namespace() == workload.Namespace && s.Spec.ClusterIP == "None"))
            {
                Add("service", $"its serviceName '{serviceName}' is not a headless Service of its namespace");
            }

            foreach (var container in pod.Containers)
            {
                var env = Environment(container, workload.Namespace, configMaps);
                CheckContainer(workload, pod, container, env, Add);
            }
        }

        foreach (var service in services)
        {
            CheckService(service, workloads, violations);
        }

        return violations;
    }

    private static void CheckNamespaces(IReadOnlyList<IKubernetesObject<V1ObjectMeta>> objects, List<Violation> violations)
    {
        var namespaces = objects.OfType<V1Namespace>().ToDictionary(n => n.Name(), StringComparer.Ordinal);
        foreach (var used in objects.Where(o => o is not V1Namespace).Select(o => o.Namespace()).Distinct())
        {
            if (used is null || !namespaces.TryGetValue(used, out var ns))
            {
                violations.Add(new Violation($"Namespace {used ?? "(none)"}", "namespace", "objects are placed in a namespace the manifests do not create"));
            }
            else if (Get(ns.Labels(), "pod-security.kubernetes.io/enforce") != "restricted")
            {
                violations.Add(new Violation($"Namespace {used}", "namespace", "does not enforce the restricted Pod Security Standard (label pod-security.kubernetes.io/enforce: restricted)"));
            }
        }
    }

    private static void CheckPodSecurity(V1PodSpec pod, Action<string, string> add)
    {
        if (pod.HostNetwork == true || pod.HostPID == true || pod.HostIPC == true)
        {
            add("restricted", "uses a host namespace");
        }

        foreach (var volume in pod.Volumes ?? [])
        {
            var types = typeof(V1Volume).GetProperties().Where(p => p.Name != nameof(V1Volume.Name) && p.GetValue(volume) is not null).Select(p => p.Name).ToList();
            if (types.Any(t => !RestrictedVolumeTypes.Contains(t)))
            {
                add("restricted", $"volume {volume.Name} is of a type the restricted standard forbids ({string.Join(", ", types)})");
            }
        }

        if (pod.SecurityContext?.Sysctls is { Count: > 0 })
        {
            add("restricted", "sets sysctls");
        }
    }

    private void CheckContainer(Workload workload, V1PodSpec pod, V1Container container, IReadOnlyDictionary<string, EnvValue> env, Action<string, string> add)
    {
        var name = $"container {container.Name}";

        // The restricted Pod Security Standard, as the effective settings (the container's over the pod's).
        var podSecurity = pod.SecurityContext;
        var security = container.SecurityContext;
        if ((security?.RunAsNonRoot ?? podSecurity?.RunAsNonRoot) != true)
        {
            add("restricted", $"{name}: runAsNonRoot is not true");
        }

        if ((security?.RunAsUser ?? podSecurity?.RunAsUser) == 0)
        {
            add("restricted", $"{name}: runs as user 0");
        }

        if ((security?.SeccompProfile ?? podSecurity?.SeccompProfile)?.Type is not ("RuntimeDefault" or "Localhost"))
        {
            add("restricted", $"{name}: no RuntimeDefault (or Localhost) seccomp profile");
        }

        if (security?.AllowPrivilegeEscalation != false)
        {
            add("restricted", $"{name}: allowPrivilegeEscalation is not false");
        }

        if (security?.Privileged == true)
        {
            add("restricted", $"{name}: privileged");
        }

        if (security?.Capabilities?.Drop?.Contains("ALL") != true)
        {
            add("restricted", $"{name}: capabilities do not drop ALL");
        }

        if (security?.Capabilities?.Add?.Any(c => c != "NET_BIND_SERVICE") == true)
        {
            add("restricted", $"{name}: adds capabilities other than NET_BIND_SERVICE");
        }

        if (container.Ports?.Any(p => p.HostPort is > 0) == true)
        {
            add("restricted", $"{name}: uses a host port");
        }

        if (security?.ReadOnlyRootFilesystem != true)
        {
            add("restricted", $"{name}: the root file system is not read-only");
        }

        if (!(container.VolumeMounts ?? []).Any(m => m.MountPath == "/tmp" && pod.Volumes?.FirstOrDefault(v => v.Name == m.Name)?.EmptyDir is not null))
        {
            add("restricted", $"{name}: /tmp is not an emptyDir (the root file system is read-only; .NET writes its diagnostics socket there)");
        }

        // Resources: the pod is not BestEffort, and the session memory budget (1/8 of what the GC may use) follows the limit.
        var requests = container.Resources?.Requests;
        var limits = container.Resources?.Limits;
        if (requests?.ContainsKey("cpu") != true || requests.ContainsKey("memory") != true)
        {
            add("resources", $"{name}: no CPU and memory requests");
        }

        if (limits?.TryGetValue("memory", out var memoryLimit) != true)
        {
            add("resources", $"{name}: no memory limit");
        }
        else if (requests?.TryGetValue("memory", out var memoryRequest) == true && memoryRequest.ToDecimal() > memoryLimit!.ToDecimal())
        {
            add("resources", $"{name}: the memory request {memoryRequest} is above the limit {memoryLimit}");
        }

        // The image: tagged, not latest, and an explicit pull policy (a locally loaded image must not be pulled).
        if (container.ImagePullPolicy is null)
        {
            add("image", $"{name}: no imagePullPolicy");
        }

        if (!ImageTagged().IsMatch(container.Image ?? "") || container.Image!.EndsWith(":latest", StringComparison.Ordinal))
        {
            add("image", $"{name}: image '{container.Image}' has no tag or digest, or is latest");
        }

        // The gateway (docs/gateway.md) is not a PersistentServices service: it signs no call and keeps no log. Its own
        // rule: it holds nothing, so it must not be given a log directory (whatever it wrote there would be lost with the
        // pod), and it runs as a Deployment of at least two copies.
        var port = AppPort(env);
        if (env.Keys.Any(k => k.StartsWith("PersistentGateway__", StringComparison.Ordinal)))
        {
            if (env.ContainsKey("PersistentServices__LogDirectory"))
            {
                add("gateway", $"{name}: the gateway is given a log directory; it keeps no state");
            }

            if (workload.Replicas is not >= 2 || workload.ServiceName is not null)
            {
                add("gateway", $"{name}: the gateway must run as a Deployment of two or more copies (it has {workload.Replicas ?? 1})");
            }

            CheckProbes(container, name, port, add);
            CheckGracePeriod(workload, pod, container, name, env, add);
            CheckMetrics(workload, name, port, add);
            return;
        }

        // The peer key: from a Secret, never a value in a manifest or a ConfigMap.
        if (!env.TryGetValue("PersistentServices__Calls__PeerKey", out var peerKey))
        {
            add("peer-key", $"{name}: no PersistentServices__Calls__PeerKey");
        }
        else if (peerKey.FromSecret is null)
        {
            add("peer-key", $"{name}: the peer key is {peerKey.Source}, not a secretKeyRef");
        }

        // So are the keys accepted besides it during a rotation (PersistentCallOptions.AcceptedPeerKeys).
        foreach (var (variable, accepted) in env.Where(e => e.Key.StartsWith("PersistentServices__Calls__AcceptedPeerKeys__", StringComparison.Ordinal)))
        {
            if (accepted.FromSecret is null)
            {
                add("peer-key", $"{name}: the accepted peer key {variable} is {accepted.Source}, not a secretKeyRef");
            }
        }

        CheckProbes(container, name, port, add);
        CheckGracePeriod(workload, pod, container, name, env, add);
        CheckMetrics(workload, name, port, add);
        CheckLogVolume(workload, pod, container, name, env, add);
    }

    private void CheckProbes(V1Container container, string name, int port, Action<string, string> add)
    {
        void Probe(V1Probe? probe, string kind, IReadOnlyCollection<string> paths, int minimumSecondsToFail, int minimumFailures)
        {
            if (probe?.HttpGet is not { } get)
            {
                add("probes", $"{name}: no {kind} probe on HTTP");
                return;
            }

            if (!paths.Contains(get.Path))
            {
                add("probes", $"{name}: the {kind} probe's path '{get.Path}' is not what the app maps for it ({string.Join(" or ", paths)})");
            }

            var probePort = get.Port.Value is { } value && int.TryParse(value, NumberStyles.None, CultureInfo.InvariantCulture, out var number)
                ? number
                : container.Ports?.FirstOrDefault(p => p.Name == get.Port.Value)?.ContainerPort;
            if (probePort != port)
            {
                add("probes", $"{name}: the {kind} probe's port '{get.Port.Value}' is not the port the app listens on ({port})");
            }

            var failures = probe.FailureThreshold ?? 3;
            if (failures < minimumFailures || failures * (probe.PeriodSeconds ?? 10) < minimumSecondsToFail)
            {
                add("probes", $"{name}: the {kind} probe fails after {failures} failures {probe.PeriodSeconds ?? 10} s apart (at least {minimumFailures}, and {minimumSecondsToFail} s)");
            }
        }

        Probe(container.ReadinessProbe, "readiness", [app.ReadyPath], minimumSecondsToFail: 2, minimumFailures: 2);
        Probe(container.LivenessProbe, "liveness", [app.LivePath], minimumSecondsToFail: 30, minimumFailures: 3);
        Probe(container.StartupProbe, "startup", [app.LivePath, app.ReadyPath], minimumSecondsToFail: 120, minimumFailures: 3);
        if (container.ReadinessProbe?.HttpGet?.Path is { } ready && ready == container.LivenessProbe?.HttpGet?.Path)
        {
            add("probes", $"{name}: readiness and liveness share the path {ready}");
        }
    }

    private static void CheckGracePeriod(Workload workload, V1PodSpec pod, V1Container container, string name, IReadOnlyDictionary<string, EnvValue> env, Action<string, string> add)
    {
        var preStop = container.Lifecycle?.PreStop is { } handler
            ? handler.Sleep?.Seconds ?? (handler.Exec?.Command is ["sleep", var seconds] && long.TryParse(seconds, NumberStyles.None, CultureInfo.InvariantCulture, out var s) ? s : (long?)null)
            : null;
        if (preStop is not (>= 1 and <= 10))
        {
            add("prestop", $"{name}: no short preStop sleep (1-10 s) before SIGTERM");
        }

        var drain = DefaultShutdownTimeoutSeconds;
        if (env.TryGetValue(ShutdownTimeoutVariable, out var shutdown))
        {
            if (!int.TryParse(shutdown.Value, NumberStyles.None, CultureInfo.InvariantCulture, out drain))
            {
                add("grace-period", $"{name}: {ShutdownTimeoutVariable} is not a number of seconds ({shutdown.Source})");
                return;
            }
        }

        var grace = pod.TerminationGracePeriodSeconds ?? DefaultGracePeriodSeconds;
        if (grace <= drain + (preStop ?? 0))
        {
            add("grace-period", $"{name}: terminationGracePeriodSeconds {grace} is not longer than the drain ({drain} s, {ShutdownTimeoutVariable}) and the preStop sleep ({preStop ?? 0} s) together: SIGKILL would cut the drain short");
        }
    }

    private void CheckMetrics(Workload workload, string name, int port, Action<string, string> add)
    {
        var annotations = workload.Template.Metadata?.Annotations ?? new Dictionary<string, string>();
        if (Get(annotations, "prometheus.io/scrape") != "true"
            || Get(annotations, "prometheus.io/path") != app.MetricsPath
            || Get(annotations, "prometheus.io/port") != port.ToString(CultureInfo.InvariantCulture))
        {
            add("metrics", $"{name}: the pod's prometheus.io/scrape, /path and /port annotations do not name the app's metrics ({app.MetricsPath} on {port})");
        }
    }

    private void CheckLogVolume(Workload workload, V1PodSpec pod, V1Container container, string name, IReadOnlyDictionary<string, EnvValue> env, Action<string, string> add)
    {
        if (!env.TryGetValue("PersistentServices__LogDirectory", out var directory) || directory.Value is not { Length: > 0 } logDirectory)
        {
            add("log-volume", $"{name}: PersistentServices__LogDirectory is not set");
            return;
        }

        var mount = (container.VolumeMounts ?? [])
            .Where(m => logDirectory == m.MountPath || logDirectory.StartsWith(m.MountPath.TrimEnd('/') + "/", StringComparison.Ordinal))
            .MaxBy(m => m.MountPath.Length);
        if (mount is null)
        {
            add("log-volume", $"{name}: the log directory {logDirectory} is on no volume (the container's own file system)");
            return;
        }

        var (size, what) = VolumeSize(workload, pod, mount.Name);
        if (size is null)
        {
            add("log-volume", $"{name}: the log's volume '{mount.Name}' has no size the manifests bound ({what})");
            return;
        }

        int Int(string key, int fallback) => env.TryGetValue(key, out var v) && int.TryParse(v.Value, NumberStyles.None, CultureInfo.InvariantCulture, out var n) ? n : fallback;
        long Long(string key, long fallback) => env.TryGetValue(key, out var v) && long.TryParse(v.Value, NumberStyles.None, CultureInfo.InvariantCulture, out var n) ? n : fallback;
        var defaults = app.Defaults;
        var idle = Int("PersistentServices__IdleCheckpointAfter", defaults.IdleCheckpointAfter);
        var period = Long("PersistentServices__ServiceCheckpointLogBytes", defaults.ServiceCheckpointLogBytes);
        var segmentBits = Int("PersistentServices__Log__SegmentSizeBits", defaults.Log.SegmentSizeBits);
        var zeroFill = Int("PersistentServices__Log__ZeroFillBytes", defaults.Log.ZeroFillBytes);
        var worst = LogWorstCaseBytes(idle, period, segmentBits, zeroFill);
        if (worst > UsableFraction * size.Value)
        {
            add("log-volume", string.Create(CultureInfo.InvariantCulture,
                $"{name}: the log may take {worst / (1 << 20)} MiB ((IdleCheckpointAfter {idle} + 2) x ServiceCheckpointLogBytes {period / (1 << 20)} MiB + a {(1L << segmentBits) / (1 << 20)} MiB segment + 2 x ZeroFillBytes {zeroFill / (1 << 20)} MiB), more than {UsableFraction:P0} of {what} ({size.Value / (1 << 20)} MiB)"));
        }
    }

    /// <summary>The bytes a volume holds: its claim's request (a StatefulSet's volumeClaimTemplates) or an emptyDir's sizeLimit.</summary>
    private static (long? Bytes, string What) VolumeSize(Workload workload, V1PodSpec pod, string volume)
    {
        if (workload.Claims.FirstOrDefault(c => c.Name() == volume) is { } claim)
        {
            return claim.Spec?.Resources?.Requests?.TryGetValue("storage", out var storage) == true
                ? ((long)storage.ToDecimal(), $"the claim {volume}")
                : (null, $"the claim {volume} requests no storage");
        }

        return pod.Volumes?.FirstOrDefault(v => v.Name == volume) switch
        {
            { EmptyDir.SizeLimit: { } limit } => ((long)limit.ToDecimal(), $"the emptyDir {volume}'s sizeLimit"),
            { EmptyDir: not null } => (null, $"the emptyDir {volume} has no sizeLimit"),
            { PersistentVolumeClaim: not null } => (null, $"{volume} is a claim made outside these manifests"),
            null => (null, $"no volume {volume}"),
            _ => (null, $"{volume} is neither a claim of the StatefulSet nor an emptyDir"),
        };
    }

    private static void CheckService(V1Service service, IReadOnlyList<Workload> workloads, List<Violation> violations)
    {
        var id = $"Service {service.Namespace()}/{service.Name()}";
        var selected = workloads.Where(w => w.Namespace == service.Namespace() && service.Spec.Selector is { Count: > 0 } selector
                                            && selector.All(l => Get(w.Labels, l.Key) == l.Value)).ToList();
        if (selected.Count == 0)
        {
            violations.Add(new Violation(id, "service", "selects no workload's pods"));
            return;
        }

        if (service.Spec.ClusterIP == "None" && service.Spec.PublishNotReadyAddresses != true)
        {
            violations.Add(new Violation(id, "service", "is headless without publishNotReadyAddresses: a recovering or draining pod would lose its DNS name, and its callers would get name-resolution errors instead of 503 with Retry-After"));
        }

        foreach (var port in service.Spec.Ports ?? [])
        {
            var target = port.TargetPort?.Value ?? port.Port.ToString(CultureInfo.InvariantCulture);
            foreach (var workload in selected)
            {
                var ports = workload.Template.Spec.Containers.SelectMany(c => c.Ports ?? []).ToList();
                if (!ports.Any(p => p.Name == target || p.ContainerPort.ToString(CultureInfo.InvariantCulture) == target))
                {
                    violations.Add(new Violation(id, "service", $"port {port.Port} targets '{target}', which {workload.Id}'s containers do not declare"));
                }
            }
        }
    }

    private int AppPort(IReadOnlyDictionary<string, EnvValue> env)
    {
        if (env.TryGetValue("ASPNETCORE_URLS", out var urls) && urls.Value is { } list)
        {
            var match = UrlPort().Match(list);
            return match.Success ? int.Parse(match.Groups["port"].Value, CultureInfo.InvariantCulture) : 80;
        }

        return env.TryGetValue("ASPNETCORE_HTTP_PORTS", out var ports) && int.TryParse(ports.Value?.Split(';')[0], NumberStyles.None, CultureInfo.InvariantCulture, out var port)
            ? port
            : app.ImagePort;
    }

    /// <summary>A container's environment as Kubernetes builds it: <c>envFrom</c> first, then <c>env</c> over it.</summary>
    private static Dictionary<string, EnvValue> Environment(V1Container container, string? ns, IReadOnlyList<V1ConfigMap> configMaps)
    {
        var env = new Dictionary<string, EnvValue>(StringComparer.Ordinal);
        foreach (var source in container.EnvFrom ?? [])
        {
            if (source.ConfigMapRef is { } reference && configMaps.FirstOrDefault(c => c.Name() == reference.Name && c.Namespace() == ns) is { } map)
            {
                foreach (var entry in (IEnumerable<KeyValuePair<string, string>>?)map.Data ?? [])
                {
                    env[(source.Prefix ?? "") + entry.Key] = new EnvValue(entry.Value, $"ConfigMap {map.Name()}", null);
                }
            }
        }

        foreach (var variable in container.Env ?? [])
        {
            env[variable.Name] = variable.ValueFrom?.SecretKeyRef is { } secret
                ? new EnvValue(null, $"Secret {secret.Name}", secret.Name)
                : variable.ValueFrom is not null ? new EnvValue(null, "a field reference", null) : new EnvValue(variable.Value, "a literal value", null);
        }

        return env;
    }

    private static string? Get(IDictionary<string, string>? values, string key) => values is not null && values.TryGetValue(key, out var value) ? value : null;

    private static bool Selects(V1LabelSelector? selector, IDictionary<string, string> labels)
        => selector is { MatchLabels.Count: > 0 } && selector.MatchExpressions is null or { Count: 0 }
           && selector.MatchLabels.All(l => labels.TryGetValue(l.Key, out var v) && v == l.Value);

    [GeneratedRegex(@"[:@][^/]+$")]
    private static partial Regex ImageTagged();

    [GeneratedRegex(@":(?<port>\d+)/?(;|$)")]
    private static partial Regex UrlPort();

    private sealed record EnvValue(string? Value, string Source, string? FromSecret);

    /// <summary>A StatefulSet or Deployment: its pod template, labels and (a StatefulSet's) claims and service.</summary>
    private sealed record Workload(string Id, string? Namespace, V1PodTemplateSpec Template, IDictionary<string, string> Labels, IList<V1PersistentVolumeClaim> Claims, string? ServiceName, int? Replicas)
    {
        public static Workload? From(IKubernetesObject<V1ObjectMeta> o) => o switch
        {
            V1StatefulSet s => new($"StatefulSet {s.Namespace()}/{s.Name()}", s.Namespace(), s.Spec.Template, s.Spec.Template.Metadata?.Labels ?? new Dictionary<string, string>(),
                s.Spec.VolumeClaimTemplates ?? [], s.Spec.ServiceName, s.Spec.Replicas),
            V1Deployment d => new($"Deployment {d.Namespace()}/{d.Name()}", d.Namespace(), d.Spec.Template, d.Spec.Template.Metadata?.Labels ?? new Dictionary<string, string>(), [], null, d.Spec.Replicas),
            _ => null,
        };
    }
}
