using System.Diagnostics;
using System.Globalization;
using System.Net.Http.Json;
using System.Net.Sockets;
using System.Security.Cryptography;

namespace Bookstore.Launcher;

/// <summary>
/// Every service of the bookstore as its own process on 127.0.0.1: <c>stores</c> Bookstores, PriceGrabber,
/// TaxCalculator and BookSeller, each with its own directory under <see cref="Root"/>. One peer key, generated here for
/// this run and handed to the services in their environment (never printed or logged). A service that dies is started
/// again on its port (a supervisor, as an orchestrator would); <see cref="StopAsync"/> stops them all.
/// </summary>
internal sealed class Deployment : IAsyncDisposable
{
    private readonly CancellationTokenSource _stopping = new();
    private readonly List<Task> _supervisors = [];
    private readonly Action<string> _events;

    private Deployment(string root, LoggingConfiguration configuration, IReadOnlyList<ComponentProcess> services, Action<string> events)
    {
        Root = root;
        Configuration = configuration;
        Services = services;
        _events = events;
    }

    public string Root { get; }

    public LoggingConfiguration Configuration { get; }

    /// <summary>Stores first, then PriceGrabber, TaxCalculator, BookSeller.</summary>
    public IReadOnlyList<ComponentProcess> Services { get; }

    /// <summary>One process per store (with replicas its first node: the reconciliation and the buyer follow its group from there).</summary>
    public IEnumerable<ComponentProcess> Stores => Heads.Where(s => s.Component == "store");

    public ComponentProcess PriceGrabber => Heads.Single(s => s.Component == "pricegrabber");

    public ComponentProcess Seller => Heads.Single(s => s.Component == "seller");

    /// <summary>The gateway in front of PriceGrabber and BookSeller (<c>--gateway</c>), or null. Not one of <see cref="Services"/>: never killed or upgraded.</summary>
    public ComponentProcess? Gateway { get; private set; }

    /// <summary>Where the buyer reaches <paramref name="service"/>: through the gateway (under its path prefix) when there is one, else directly.</summary>
    public Uri BuyerUrl(ComponentProcess service) => Gateway is { } gateway ? new Uri(gateway.Url, "/" + service.Service + "/") : service.Url;

    /// <summary>Restart a service that died with its log deleted (a lost disk: only to show that the reconciliation notices).</summary>
    public bool WipeOnRestart { get; set; }

    /// <summary>Crashes and restarts the supervisor saw (a kill included).</summary>
    public int Crashes { get; private set; }

    /// <summary>Upgrades done (<see cref="UpgradeAsync"/>: one service stopped and started again as a new build).</summary>
    public int Upgrades { get; private set; }

    /// <summary>
    /// Each time a service was not serving: from its kill, crash or stop to ready again (<see cref="Stopwatch"/>
    /// timestamps), so the summary can tell the requests sent during a restart from the rest.
    /// </summary>
    public List<(long From, long To)> Outages { get; } = [];

    /// <summary>
    /// With <c>--replicas</c>: each replicated service's nodes (log nodes in order, then its witness), by service name.
    /// The same nodes are in <see cref="Services"/>.
    /// </summary>
    public IReadOnlyDictionary<string, IReadOnlyList<ComponentProcess>> Groups { get; private set; } = new Dictionary<string, IReadOnlyList<ComponentProcess>>();

    /// <summary>
    /// The replication groups, each a service's log nodes (the primary and its replicas) by base address, as callers follow
    /// them: the services through <c>PersistentServices__Calls__ReplicationGroups</c>, the launcher's clients through
    /// <see cref="PersistentServices.ReplicationGroupsHandler"/>.
    /// </summary>
    public IReadOnlyList<IReadOnlyList<Uri>> ReplicationGroups { get; private set; } = [];

    /// <summary>Replicas per persistent service (<c>--replicas</c>).</summary>
    public int Replicas { get; private set; }

    /// <summary>Failovers seen: a group's primary replaced by another node in a newer term.</summary>
    public int Failovers { get; private set; }

    /// <summary>Failovers of a primary the chaos monkey killed: from its kill to the first status of its successor as the primary (ms).</summary>
    public List<double> FailoverTimes { get; } = [];

    /// <summary>Nodes that came back with their log directory deleted (<c>--lose-node</c>).</summary>
    public int LostNodes { get; private set; }

    /// <summary>Fenced old primaries restarted by the launcher (as a liveness probe would: they wait for a restart).</summary>
    public int FencedRestarts { get; private set; }

    /// <summary>Starts every service (in parallel) and returns once all are ready.</summary>
    public static async Task<Deployment> StartAsync(string root, int stores, LoggingConfiguration configuration, Action<string> events, CancellationToken cancellationToken, bool gateway = false, int replicas = 0)
    {
        var peerKey = Base64Url(RandomNumberGenerator.GetBytes(32)); // this run's secret: in the services' environment only
        var roles = configuration.UseRoles;
        var storeNames = Enumerable.Range(1, stores).Select(i => $"store-{i}").ToList();
        List<(string Name, string Component, string Kind)> plan =
        [
            .. storeNames.Select(n => (n, "store", "persistent")),
            ("pricegrabber", "pricegrabber", roles ? "read-only" : "persistent"),
            ("taxcalculator", "tax", roles ? "functional" : "persistent"),
            ("bookseller", "seller", "persistent"),
        ];

        // Every persistent service gets N replicas with --replicas N (a group of N + 1 log nodes), and with N = 1 a witness:
        // Raft needs three voters for a majority that survives a loss.
        int NodesOf(string kind) => replicas > 0 && kind == "persistent" ? replicas + 1 + (replicas == 1 ? 1 : 0) : 1;
        var ports = FreePorts(plan.Sum(p => NodesOf(p.Kind)) + 1);
        var next = 0;
        var portsOf = plan.ToDictionary(p => p.Name, p => ports.Skip((next += NodesOf(p.Kind)) - NodesOf(p.Kind)).Take(NodesOf(p.Kind)).ToList());
        string Address(int port) => $"http://127.0.0.1:{port.ToString(CultureInfo.InvariantCulture)}";
        var logNodes = plan.Where(p => NodesOf(p.Kind) > 1)
            .ToDictionary(p => p.Name, p => (IReadOnlyList<Uri>)[.. portsOf[p.Name].Take(replicas + 1).Select(port => new Uri(Address(port)))]);
        var storeList = string.Join(';', storeNames.Select(n => $"{n}={Address(portsOf[n][0])}"));
        var taxUrl = Address(portsOf["taxcalculator"][0]);
        var groups = logNodes.Values.ToList();

        ComponentProcess Service(string name, string component, string kind, int port, string directory, Dictionary<string, string>? more = null, IReadOnlyList<Uri>? group = null, int node = -1)
        {
            var environment = new Dictionary<string, string>
            {
                ["PersistentServices__ServiceName"] = name,
                ["PersistentServices__LogDirectory"] = Path.Combine(directory, "log"),
                ["PersistentServices__Calls__PeerKey"] = peerKey,
                // The launcher's monitor reads each node's GET /ps/replication/status unsigned (every node here is on loopback).
                ["PersistentServices__Replication__AnonymousStatus"] = "true",
                ["PersistentServices__Calls__Logging"] = configuration.Logging.ToString(),
                ["PersistentServices__Calls__UseRoles"] = roles ? "true" : "false",
                ["Bookstore__Stores"] = storeList,
                ["Bookstore__TaxUrl"] = taxUrl,
                ["Bookstore__ParentPid"] = Environment.ProcessId.ToString(CultureInfo.InvariantCulture),
            };
            // Every service's calls follow the groups' primaries (PersistentCallOptions.ReplicationGroups, by index).
            for (var g = 0; g < groups.Count; g++)
            {
                for (var n = 0; n < groups[g].Count; n++)
                {
                    environment[$"PersistentServices__Calls__ReplicationGroups__{g.ToString(CultureInfo.InvariantCulture)}__{n.ToString(CultureInfo.InvariantCulture)}"] = groups[g][n].ToString().TrimEnd('/');
                }
            }

            foreach (var (key, value) in more ?? [])
            {
                environment[key] = value;
            }

            return new ComponentProcess(more is null ? name : Path.GetFileName(directory) switch { "witness" => name + ".w", var nodeDirectory => name + "." + nodeDirectory[4..] },
                component, kind, port, directory, environment) { Service = name, Group = group, Node = node };
        }

        var services = new List<ComponentProcess>();
        var groupNodes = new Dictionary<string, IReadOnlyList<ComponentProcess>>();
        foreach (var (name, component, kind) in plan)
        {
            if (!logNodes.TryGetValue(name, out var group))
            {
                services.Add(Service(name, component, kind, portsOf[name][0], Path.Combine(root, name)));
                continue;
            }

            // One configuration for every node but its own address (as a StatefulSet's pods get it): Raft failover, the first
            // node the initial primary, every log node listed (a node skips its own address), the witness with N = 1.
            var witness = replicas == 1 ? new Uri(Address(portsOf[name][^1])) : null;
            var nodes = new List<ComponentProcess>();
            for (var i = 0; i < portsOf[name].Count; i++)
            {
                var isWitness = witness is not null && i == portsOf[name].Count - 1;
                var replication = new Dictionary<string, string>
                {
                    ["PersistentServices__Replication__Failover"] = "Raft",
                    ["PersistentServices__Replication__Address"] = Address(portsOf[name][i]),
                    ["PersistentServices__Replication__InitialPrimary"] = group[0].ToString().TrimEnd('/'),
                    ["PersistentServices__Replication__ElectionTimeout"] = ElectionTimeout.ToString("c", CultureInfo.InvariantCulture),
                };
                for (var n = 0; n < group.Count; n++)
                {
                    replication[$"PersistentServices__Replication__Replicas__{n.ToString(CultureInfo.InvariantCulture)}"] = group[n].ToString().TrimEnd('/');
                }

                if (witness is not null)
                {
                    replication["PersistentServices__Replication__Witnesses__0"] = witness.ToString().TrimEnd('/');
                }

                if (isWitness)
                {
                    replication["PersistentServices__Replication__Role"] = "Witness";
                }

                var directory = Path.Combine(root, name, isWitness ? "witness" : "node" + i.ToString(CultureInfo.InvariantCulture));
                nodes.Add(Service(name, component, isWitness ? "witness" : kind, portsOf[name][i], directory, replication, group, isWitness ? -1 : i));
            }

            groupNodes[name] = nodes;
            services.AddRange(nodes);
        }

        var deployment = new Deployment(root, configuration, services, events)
        {
            Groups = groupNodes,
            ReplicationGroups = groups,
            Replicas = replicas,
        };
        try
        {
            await Task.WhenAll(services.Select(s => s.StartAsync(cancellationToken)));
            if (groupNodes.Count > 0)
            {
                deployment._supervisors.Add(deployment.MonitorAsync());
                var waited = Stopwatch.StartNew();
                while (!deployment.AllReady)
                {
                    if (waited.Elapsed > TimeSpan.FromMinutes(1))
                    {
                        throw new TimeoutException("the replication groups had no primary with every replica streaming within a minute: see each node's service.log");
                    }

                    await Task.Delay(100, cancellationToken);
                }
            }
        }
        catch
        {
            await deployment.StopAsync();
            throw;
        }

        if (gateway)
        {
            // The buyer's services behind ps-gateway (docs/gateway.md): each under its name as path prefix, one instance (with
            // --replicas its group's nodes, comma-separated: the gateway follows the primary), every unsafe endpoint
            // persistent (PriceGrabber's and BookSeller's POSTs are [Persistent] or read-only methods, which a resend with the
            // same identity answers without running anything twice).
            var settings = new Dictionary<string, string>
            {
                ["Bookstore__ParentPid"] = Environment.ProcessId.ToString(CultureInfo.InvariantCulture),
                ["PersistentGateway__PeerKey"] = peerKey, // it signs the keys it generates (docs/gateway.md, "Generated keys")
            };
            foreach (var behind in new[] { deployment.PriceGrabber, deployment.Seller })
            {
                var key = "PersistentGateway__Services__" + behind.Service + "__";
                settings[key + "PathPrefix"] = "/" + behind.Service;
                settings[key + "Instances__0"] = behind.Group is { } nodes ? string.Join(',', nodes.Select(n => n.ToString().TrimEnd('/'))) : behind.Url.ToString().TrimEnd('/');
                settings[key + "Persistent"] = "true";
            }

            deployment.Gateway = new ComponentProcess("gateway", "gateway", "gateway", ports[^1], Path.Combine(root, "gateway"), settings);
            try
            {
                await deployment.Gateway.StartAsync(cancellationToken);
            }
            catch
            {
                await deployment.StopAsync();
                throw;
            }
        }

        foreach (var service in deployment.Gateway is { } g ? [.. services, g] : services)
        {
            deployment._supervisors.Add(deployment.SuperviseAsync(service));
        }

        return deployment;
    }

    /// <summary>
    /// The Raft election timeout of every group (1 s; the library's default is 0.3 s): this deployment runs a dozen or more
    /// processes on one machine, where a 0.3 s pause is common. A killed primary is given up after two thirds of it.
    /// </summary>
    private static readonly TimeSpan ElectionTimeout = TimeSpan.FromSeconds(1);

    /// <summary>The node of <paramref name="service"/>'s group that serves as its primary now (the newest term's), or null.</summary>
    public ComponentProcess? PrimaryOf(string service)
    {
        if (!Groups.TryGetValue(service, out var nodes))
        {
            return null;
        }

        var newest = nodes.Max(n => n.Observed?.Term ?? 0);
        return nodes.FirstOrDefault(n => n.State == ComponentState.Ready && n.Observed is { Role: "Primary" } o && o.Term >= newest);
    }

    /// <summary>A group is healthy when every node is up, one is the primary of the newest term and all its replicas stream (are caught up).</summary>
    private bool Healthy(IReadOnlyList<ComponentProcess> nodes)
        => nodes.All(n => n.State == ComponentState.Ready && n.Observed is { Fenced: false }) &&
           PrimaryOf(nodes[0].Service) is { Observed: { } primary } && primary.Streaming == nodes.Count(n => !n.IsWitness) - 1;

    /// <summary>The services' first processes, one per service (with replicas its first node; its callers follow the primary from there).</summary>
    public IEnumerable<ComponentProcess> Heads => Services.Where(s => s.Node <= 0 && !s.IsWitness);

    /// <summary>The forces and commits of every service so far (<c>GET /diagnostics/forces</c>).</summary>
    public async Task<IReadOnlyList<ForceCounts>> ReadForcesAsync(CancellationToken cancellationToken)
    {
        using var http = new HttpClient { Timeout = TimeSpan.FromSeconds(10) };
        var counts = new List<ForceCounts>();
        foreach (var service in Heads)
        {
            // A replicated service's forces are its primary's (a replica forces nothing of its own requests).
            var at = Groups.ContainsKey(service.Service) ? PrimaryOf(service.Service) ?? service : service;
            counts.Add((await http.GetFromJsonAsync<ForceCounts>(new Uri(at.Url, "/diagnostics/forces"), cancellationToken))!);
        }

        return counts;
    }

    /// <summary>True when every service is up and ready.</summary>
    /// <summary>True when every service is up and ready; with replicas, every group healthy (a primary, every replica streaming).</summary>
    public bool AllReady => Services.All(s => s.State == ComponentState.Ready) && Groups.Values.All(Healthy);

    /// <summary>Stops every service: SIGTERM (each drains), SIGKILL after 10 s.</summary>
    public async Task StopAsync()
    {
        await _stopping.CancelAsync();
        // The gateway first: it holds no state, and requests it still holds would only wait for services going away.
        if (Gateway is { } gateway)
        {
            await gateway.StopAsync(TimeSpan.FromSeconds(10));
        }

        await Task.WhenAll(Services.Select(s => s.StopAsync(TimeSpan.FromSeconds(10))));
        Task[] supervisors;
        lock (_supervisors)
        {
            supervisors = [.. _supervisors];
        }

        await Task.WhenAll(supervisors);
    }

    public async ValueTask DisposeAsync()
    {
        if (!_stopping.IsCancellationRequested)
        {
            await StopAsync();
        }

        _stopping.Dispose();
    }

    /// <summary>
    /// Replaces <paramref name="service"/> by <paramref name="build"/> (README.md, "Upgrades"): a graceful stop (SIGTERM: it
    /// drains, checkpoints and exits; a group's primary hands its role to a replica first, after it checkpointed every session;
    /// SIGKILL after 30 s), then a start of the new build on the same port and log. Only
    /// a graceful stop lets the new build start without replaying the old build's requests (docs/upgrades.md): when the
    /// stop was not graceful (the chaos monkey's SIGKILL came during the drain), the old build is started again on its log
    /// to recover, and stopped again, before the new one starts; else the new build's replies (a field added) would not
    /// be the logged ones and the sessions would diverge.
    /// </summary>
    public async Task UpgradeAsync(ComponentProcess service, int build)
    {
        var from = Stopwatch.GetTimestamp();
        service.Replacing = true;

        // Once stopped, the service is started again whatever the run does meanwhile (the end of the buyers' loops included):
        // an upgrade under way finishes, so the reconciliation finds every service up; only the deployment's own stop ends it.
        try
        {
            await service.StopAsync(TimeSpan.FromSeconds(30));
            while (service.ExitCode is not 0)
            {
                _events($"{service.Name} did not stop gracefully (exit {service.ExitCode?.ToString(CultureInfo.InvariantCulture) ?? "?"}): recovering it on build {service.Build.ToString(CultureInfo.InvariantCulture)} before the upgrade");
                await service.StartAsync(_stopping.Token);
                await service.StopAsync(TimeSpan.FromSeconds(30));
            }

            service.SetBuild(build);
            await service.StartAsync(_stopping.Token);
        }
        finally
        {
            service.Replacing = false;
        }

        lock (Outages)
        {
            Outages.Add((from, Stopwatch.GetTimestamp()));
        }

        Upgrades++;
        _events($"{service.Name} upgraded to build {build.ToString(CultureInfo.InvariantCulture)} in {Stopwatch.GetElapsedTime(from).TotalSeconds:0.0} s (stopped gracefully: drained, or its primary role handed over; log carried over), pid {service.ProcessId.ToString(CultureInfo.InvariantCulture)}");
        lock (_supervisors)
        {
            _supervisors.Add(SuperviseAsync(service));
        }
    }

    /// <summary>
    /// The chaos monkey's kill of <paramref name="service"/>'s primary (found by its status, <c>GET /ps/replication/status</c>):
    /// SIGKILL; its supervisor starts it again, unchanged, once another node is the primary (it rejoins as a replica), with
    /// its log directory deleted first when <paramref name="loseNode"/>. Returns the node killed, or null when the group has
    /// no primary now.
    /// </summary>
    public async Task<ComponentProcess?> KillPrimaryAsync(string service, bool loseNode)
    {
        if (PrimaryOf(service) is not { } primary)
        {
            return null;
        }

        primary.KilledAsPrimary = true;
        primary.LoseLogOnRestart = loseNode;
        lock (_killedAt)
        {
            _killedAt[service] = Stopwatch.GetTimestamp();
        }

        await primary.KillAsync();
        return primary;
    }

    private readonly Dictionary<string, long> _killedAt = [];

    /// <summary>How long a node may stay fenced before the launcher restarts it (a demotion takes tens of milliseconds).</summary>
    private static readonly TimeSpan FencedGrace = TimeSpan.FromSeconds(3);

    /// <summary>
    /// Watches every node of every group (<c>GET /ps/replication/status</c>, every 100 ms): which is the primary (a change to
    /// another node in a newer term is a failover, timed from the chaos monkey's kill), whether each replica streams, and
    /// which is a fenced old primary: that one acknowledges nothing more and demotes itself to a replica in its process;
    /// one still fenced after <see cref="FencedGrace"/> (a failed demotion) is restarted, as Kubernetes restarts a pod whose
    /// liveness fails.
    /// </summary>
    private async Task MonitorAsync()
    {
        using var http = new HttpClient { Timeout = TimeSpan.FromSeconds(1) };
        var primaries = Groups.Keys.ToDictionary(g => g, _ => ((ComponentProcess?)null, 0L));
        try
        {
            while (!_stopping.IsCancellationRequested)
            {
                await Task.Delay(100, _stopping.Token);
                var nodes = Groups.Values.SelectMany(n => n).Where(n => n.State == ComponentState.Ready).ToList();
                await Task.WhenAll(nodes.Select(async node =>
                {
                    try
                    {
                        using var response = await http.GetAsync(new Uri(node.Url, "/ps/replication/status"), _stopping.Token);
                        using var document = System.Text.Json.JsonDocument.Parse(await response.Content.ReadAsStringAsync(_stopping.Token));
                        node.Observed = NodeStatus.Parse(document.RootElement);
                    }
                    catch (Exception ex) when (ex is HttpRequestException or System.Text.Json.JsonException or KeyNotFoundException or InvalidOperationException ||
                                               (ex is TaskCanceledException && !_stopping.IsCancellationRequested))
                    {
                        node.Observed = null;
                    }
                }));

                foreach (var (service, (was, wasTerm)) in primaries)
                {
                    if (PrimaryOf(service) is not { Observed: { } status } primary || (ReferenceEquals(primary, was) && status.Term == wasTerm))
                    {
                        continue;
                    }

                    primaries[service] = (primary, status.Term);
                    if (was is null)
                    {
                        continue; // the first primary
                    }

                    Failovers++;
                    long? killed;
                    lock (_killedAt)
                    {
                        killed = _killedAt.Remove(service, out var at) ? at : null;
                    }

                    var now = Stopwatch.GetTimestamp();
                    if (killed is { } from)
                    {
                        FailoverTimes.Add(Stopwatch.GetElapsedTime(from, now).TotalMilliseconds);
                        lock (Outages)
                        {
                            Outages.Add((from, now));
                        }
                    }

                    _events($"{service}: failover to {primary.Name} (term {status.Term.ToString(CultureInfo.InvariantCulture)})" +
                            (killed is { } k ? $", {Stopwatch.GetElapsedTime(k, now).TotalMilliseconds:0} ms after the primary's kill" : $" (from {was.Name}, not killed)"));
                }

                foreach (var node in nodes)
                {
                    node.FencedSince = node.Observed is { Fenced: true } ? node.FencedSince is 0 ? Stopwatch.GetTimestamp() : node.FencedSince : 0;
                }

                // A fenced node demotes itself to a replica within tens of milliseconds: only one still fenced after FencedGrace
                // (its demotion failed, and its liveness fails) is restarted.
                foreach (var node in nodes.Where(n => n.FencedSince != 0 && Stopwatch.GetElapsedTime(n.FencedSince) > FencedGrace && !n.Replacing &&
                                                      n.State == ComponentState.Ready))
                {
                    node.FencedSince = 0;
                    node.Replacing = true;
                    lock (_supervisors)
                    {
                        _supervisors.Add(RestartFencedAsync(node));
                    }
                }
            }
        }
        catch (OperationCanceledException) when (_stopping.IsCancellationRequested)
        {
        }
    }

    /// <summary>Restarts a fenced old primary (SIGTERM, SIGKILL after 5 s, then the same configuration): it comes back as a replica.</summary>
    private async Task RestartFencedAsync(ComponentProcess node)
    {
        FencedRestarts++;
        _events($"{node.Name} is a fenced old primary (a replica's role, no replica's log; term {node.Observed?.Term.ToString(CultureInfo.InvariantCulture) ?? "?"}): restarting it, as a liveness probe would");
        try
        {
            await node.StopAsync(TimeSpan.FromSeconds(5));
            node.Observed = null;
            await node.StartAsync(_stopping.Token);
            _events($"{node.Name} is back after its fence, pid {node.ProcessId.ToString(CultureInfo.InvariantCulture)}");
        }
        catch (OperationCanceledException) when (_stopping.IsCancellationRequested)
        {
            return;
        }
        catch (Exception ex) when (ex is InvalidOperationException or TimeoutException)
        {
            _events($"{node.Name} did not start after its fence ({ex.Message}); its supervisor tries again");
        }
        finally
        {
            node.Replacing = false;
        }

        lock (_supervisors)
        {
            _supervisors.Add(SuperviseAsync(node));
        }
    }

    /// <summary>Restarts <paramref name="service"/> on its port whenever it dies, until the deployment stops.</summary>
    private async Task SuperviseAsync(ComponentProcess service)
    {
        var failures = 0;
        while (!_stopping.IsCancellationRequested)
        {
            int exitCode;
            try
            {
                exitCode = await service.WaitForExitAsync(_stopping.Token);
            }
            catch (OperationCanceledException)
            {
                return;
            }

            if (_stopping.IsCancellationRequested || exitCode == 0 || service.Replacing)
            {
                return; // stopped: by us, by an upgrade (which starts it again), or by a Ctrl+C that reached the whole process group
            }

            var down = service.LastKill ?? Stopwatch.GetTimestamp();
            Crashes++;
            service.Observed = null;
            _events($"{service.Name} died (exit {exitCode.ToString(CultureInfo.InvariantCulture)}): restarting it on port {service.Port.ToString(CultureInfo.InvariantCulture)}");
            if (service.KilledAsPrimary)
            {
                // A killed primary comes back once its group has another (as a failed pod is replaced while the group fails
                // over): with its unchanged configuration it then rejoins as a replica (it asks the group for a newer term).
                var waited = Stopwatch.StartNew();
                while (!_stopping.IsCancellationRequested && waited.Elapsed < TimeSpan.FromSeconds(30) && PrimaryOf(service.Service) is null)
                {
                    await Task.Delay(50, CancellationToken.None);
                }

                service.KilledAsPrimary = false;
            }

            while (!_stopping.IsCancellationRequested)
            {
                try
                {
                    if (service.LoseLogOnRestart)
                    {
                        service.LoseLogOnRestart = false;
                        if (System.IO.Directory.Exists(Path.Combine(service.Directory, "log")))
                        {
                            System.IO.Directory.Delete(Path.Combine(service.Directory, "log"), recursive: true);
                        }

                        LostNodes++;
                        _events($"{service.Name}: its whole log directory deleted (--lose-node): it comes back as a new replica");
                    }

                    if (WipeOnRestart && System.IO.Directory.Exists(Path.Combine(service.Directory, "log")))
                    {
                        System.IO.Directory.Delete(Path.Combine(service.Directory, "log"), recursive: true);
                        _events($"{service.Name}: log deleted (--wipe-on-restart)");
                    }

                    await service.StartAsync(_stopping.Token);
                    if (!service.IsNode)
                    {
                        // A node's service went on serving from another node: the monitor times its failover instead.
                        lock (Outages)
                        {
                            Outages.Add((down, Stopwatch.GetTimestamp()));
                        }
                    }

                    failures = 0;
                    _events(service.IsNode
                        ? $"{service.Name} is back after {service.LastStart.TotalSeconds:0.0} s (it rejoins its group), pid {service.ProcessId.ToString(CultureInfo.InvariantCulture)}"
                        : $"{service.Name} is back after {service.LastStart.TotalSeconds:0.0} s (log recovered), pid {service.ProcessId.ToString(CultureInfo.InvariantCulture)}");
                    break;
                }
                catch (OperationCanceledException)
                {
                    return;
                }
                catch (Exception ex) when (ex is InvalidOperationException or TimeoutException)
                {
                    if (++failures >= 5)
                    {
                        _events($"{service.Name} failed to start 5 times in a row: {ex.Message}");
                        return;
                    }

                    _events($"{service.Name} did not start ({ex.Message}); trying again");
                    await Task.Delay(500, CancellationToken.None);
                }
            }
        }
    }

    private static List<int> FreePorts(int count)
    {
        // Held together until all are known, so the same port is not handed out twice.
        var listeners = Enumerable.Range(0, count).Select(_ => new TcpListener(System.Net.IPAddress.Loopback, 0)).ToList();
        try
        {
            listeners.ForEach(l => l.Start());
            return listeners.Select(l => ((System.Net.IPEndPoint)l.LocalEndpoint).Port).ToList();
        }
        finally
        {
            listeners.ForEach(l => l.Stop());
        }
    }

    private static string Base64Url(byte[] bytes) => Convert.ToBase64String(bytes).TrimEnd('=').Replace('+', '-').Replace('/', '_');
}
