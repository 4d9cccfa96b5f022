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

    public IEnumerable<ComponentProcess> Stores => Services.Where(s => s.Component == "store");

    public ComponentProcess PriceGrabber => Services.Single(s => s.Component == "pricegrabber");

    public ComponentProcess Seller => Services.Single(s => s.Component == "seller");

    /// <summary>The gateway in front of PriceGrabber and BookSeller (<c>--gateway</c>), or null. Not one of <see cref="Services"/>: never killed or upgraded.</summary>
    public ComponentProcess? Gateway { get; private set; }

    /// <summary>Where the buyer reaches <paramref name="service"/>: through the gateway (under its path prefix) when there is one, else directly.</summary>
    public Uri BuyerUrl(ComponentProcess service) => Gateway is { } gateway ? new Uri(gateway.Url, "/" + service.Name + "/") : service.Url;

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

    /// <summary>Starts every service (in parallel) and returns once all are ready.</summary>
    public static async Task<Deployment> StartAsync(string root, int stores, LoggingConfiguration configuration, Action<string> events, CancellationToken cancellationToken, bool gateway = false)
    {
        var peerKey = Base64Url(RandomNumberGenerator.GetBytes(32)); // this run's secret: in the services' environment only
        var ports = FreePorts(stores + 4);
        var storeNames = Enumerable.Range(1, stores).Select(i => $"store-{i}").ToList();
        var storeList = string.Join(';', storeNames.Select((n, i) => $"{n}=http://127.0.0.1:{ports[i].ToString(CultureInfo.InvariantCulture)}"));
        var taxUrl = $"http://127.0.0.1:{ports[stores + 1].ToString(CultureInfo.InvariantCulture)}";
        var roles = configuration.UseRoles;

        ComponentProcess Service(string name, string component, string kind, int port)
        {
            var directory = Path.Combine(root, name);
            return new ComponentProcess(name, component, kind, port, directory, new Dictionary<string, string>
            {
                ["PersistentServices__ServiceName"] = name,
                ["PersistentServices__LogDirectory"] = Path.Combine(directory, "log"),
                ["PersistentServices__Calls__PeerKey"] = peerKey,
                ["PersistentServices__Calls__Logging"] = configuration.Logging.ToString(),
                ["PersistentServices__Calls__UseRoles"] = roles ? "true" : "false",
                ["Bookstore__Stores"] = storeList,
                ["Bookstore__TaxUrl"] = taxUrl,
                ["Bookstore__ParentPid"] = Environment.ProcessId.ToString(CultureInfo.InvariantCulture),
            });
        }

        var services = new List<ComponentProcess>();
        for (var i = 0; i < stores; i++)
        {
            services.Add(Service(storeNames[i], "store", "persistent", ports[i]));
        }

        services.Add(Service("pricegrabber", "pricegrabber", roles ? "read-only" : "persistent", ports[stores]));
        services.Add(Service("taxcalculator", "tax", roles ? "functional" : "persistent", ports[stores + 1]));
        services.Add(Service("bookseller", "seller", "persistent", ports[stores + 2]));

        var deployment = new Deployment(root, configuration, services, events);
        try
        {
            await Task.WhenAll(services.Select(s => s.StartAsync(cancellationToken)));
        }
        catch
        {
            await deployment.StopAsync();
            throw;
        }

        if (gateway)
        {
            // The buyer's services behind ps-gateway (docs/gateway.md): each under its name as path prefix, one instance,
            // every unsafe endpoint persistent (PriceGrabber's and BookSeller's POSTs are [Persistent] or read-only
            // methods, which a resend with the same identity answers without running anything twice).
            var settings = new Dictionary<string, string>
            {
                ["Bookstore__ParentPid"] = Environment.ProcessId.ToString(CultureInfo.InvariantCulture),
            };
            foreach (var behind in new[] { deployment.PriceGrabber, deployment.Seller })
            {
                var key = "PersistentGateway__Services__" + behind.Name + "__";
                settings[key + "PathPrefix"] = "/" + behind.Name;
                settings[key + "Instances__0"] = behind.Url.ToString().TrimEnd('/');
                settings[key + "Persistent"] = "true";
            }

            deployment.Gateway = new ComponentProcess("gateway", "gateway", "gateway", ports[stores + 3], Path.Combine(root, "gateway"), settings);
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

    /// <summary>The forces and commits of every service so far (<c>GET /diagnostics/forces</c>).</summary>
    public async Task<IReadOnlyList<ForceCounts>> ReadForcesAsync(CancellationToken cancellationToken)
    {
        using var http = new HttpClient { Timeout = TimeSpan.FromSeconds(10) };
        var counts = new List<ForceCounts>();
        foreach (var service in Services)
        {
            counts.Add((await http.GetFromJsonAsync<ForceCounts>(new Uri(service.Url, "/diagnostics/forces"), cancellationToken))!);
        }

        return counts;
    }

    /// <summary>True when every service is up and ready.</summary>
    public bool AllReady => Services.All(s => s.State == ComponentState.Ready);

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
    /// drains, checkpoints and exits; SIGKILL after 30 s), then a start of the new build on the same port and log. Only
    /// a graceful stop lets the new build start without replaying the old build's requests (docs/upgrades.md): when the
    /// stop was not graceful (the chaos monkey's SIGKILL came during the drain), the old build is started again on its log
    /// to recover, and stopped again, before the new one starts; else the new build's replies (a field added) would not
    /// be the logged ones and the sessions would diverge.
    /// </summary>
    public async Task UpgradeAsync(ComponentProcess service, int build, CancellationToken cancellationToken)
    {
        var from = Stopwatch.GetTimestamp();
        service.Replacing = true;
        try
        {
            await service.StopAsync(TimeSpan.FromSeconds(30));
            while (service.ExitCode is not 0)
            {
                _events($"{service.Name} did not stop gracefully (exit {service.ExitCode?.ToString(CultureInfo.InvariantCulture) ?? "?"}): recovering it on build {service.Build.ToString(CultureInfo.InvariantCulture)} before the upgrade");
                await service.StartAsync(cancellationToken);
                await service.StopAsync(TimeSpan.FromSeconds(30));
            }

            service.SetBuild(build);
            await service.StartAsync(cancellationToken);
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
        _events($"{service.Name} upgraded to build {build.ToString(CultureInfo.InvariantCulture)} in {Stopwatch.GetElapsedTime(from).TotalSeconds:0.0} s (drained, log carried over), pid {service.ProcessId.ToString(CultureInfo.InvariantCulture)}");
        lock (_supervisors)
        {
            _supervisors.Add(SuperviseAsync(service));
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
            _events($"{service.Name} died (exit {exitCode.ToString(CultureInfo.InvariantCulture)}): restarting it on port {service.Port.ToString(CultureInfo.InvariantCulture)}");
            while (!_stopping.IsCancellationRequested)
            {
                try
                {
                    if (WipeOnRestart && System.IO.Directory.Exists(Path.Combine(service.Directory, "log")))
                    {
                        System.IO.Directory.Delete(Path.Combine(service.Directory, "log"), recursive: true);
                        _events($"{service.Name}: log deleted (--wipe-on-restart)");
                    }

                    await service.StartAsync(_stopping.Token);
                    lock (Outages)
                    {
                        Outages.Add((down, Stopwatch.GetTimestamp()));
                    }

                    failures = 0;
                    _events($"{service.Name} is back after {service.LastStart.TotalSeconds:0.0} s (log recovered), pid {service.ProcessId.ToString(CultureInfo.InvariantCulture)}");
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
