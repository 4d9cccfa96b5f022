using System.Globalization;
using System.Net.Http.Json;
using Bookstore.Buyer;

namespace Bookstore.Launcher;

/// <summary>
/// The one command (README.md): every service as its own process, BookBuyer's loops, optionally a chaos monkey that
/// SIGKILLs one service at a time; at the end the services' state is reconciled with what the buyer was told, and
/// every service is stopped. Prints <c>RESULT loops=… kills=… mismatches=… duplicates=…</c> last.
/// </summary>
internal static class RunCommand
{
    public static async Task<int> RunAsync(LauncherOptions options)
    {
        var fresh = options.DataDirectory is null;
        var root = options.DataDirectory ?? Path.Combine(Path.GetTempPath(), "bookstore-" + DateTime.Now.ToString("yyyyMMdd-HHmmss", CultureInfo.InvariantCulture) + "-" + Environment.ProcessId.ToString(CultureInfo.InvariantCulture));
        Directory.CreateDirectory(root);
        var configuration = options.Configuration;
        var status = new RunStatus($"configuration {configuration.Key}: {configuration.Title}{(options.Replicas > 0 ? $" · {options.Replicas.ToString(CultureInfo.InvariantCulture)} replicas per persistent service" : "")}{(options.Chaos ? options.Replicas > 0 ? " · chaos: one service (a group's primary) SIGKILLed at a time" : " · chaos: one service SIGKILLed at a time" : "")}{(options.LoseNode ? ", its log deleted" : "")}", root, options.Seconds is null ? options.Loops : null);

        // Ctrl+C: finish the current loop, reconcile, stop; a second Ctrl+C stops at once.
        using var abort = new CancellationTokenSource();
        using var finish = new CancellationTokenSource();
        ConsoleCancelEventHandler onCancel = (_, e) =>
        {
            e.Cancel = true;
            if (finish.IsCancellationRequested)
            {
                abort.Cancel();
            }
            else
            {
                finish.Cancel();
                status.Event("Ctrl+C: stopping after this loop (Ctrl+C again: at once)");
            }
        };
        Console.CancelKeyPress += onCancel;

        Deployment? deployment = null;
        var outcome = new Outcome();
        var work = RunCoreAsync(options, root, status, d => deployment = d, outcome, finish.Token, abort.Token);
        await Display.ShowWhileAsync(work, status, () => deployment, options.Plain);
        Console.CancelKeyPress -= onCancel;
        try
        {
            await work;
        }
        catch (OperationCanceledException) when (abort.IsCancellationRequested)
        {
            outcome.Interrupted = true;
        }
        catch (Exception ex) when (ex is InvalidOperationException or TimeoutException or HttpRequestException)
        {
            outcome.Error = ex.Message;
        }
        finally
        {
            if (deployment is not null)
            {
                Console.WriteLine("stopping the services …");
                await deployment.DisposeAsync();
            }
        }

        Report(options, root, status, outcome);
        if (fresh && !options.Keep && outcome.Error is null && outcome.Result is { Mismatches.Count: 0, Duplicates: 0 })
        {
            Directory.Delete(root, recursive: true);
            Console.WriteLine($"(deleted {root}; --keep keeps a run's logs)");
        }
        else
        {
            Console.WriteLine($"logs kept in {root} (each service: log/ and service.log)");
        }

        return outcome.Error is not null || outcome.Interrupted ? 1
            : outcome.Result is { Mismatches.Count: 0, Duplicates: 0 } ? 0 : 3;
    }

    private static async Task RunCoreAsync(LauncherOptions options, string root, RunStatus status, Action<Deployment> started, Outcome outcome, CancellationToken finish, CancellationToken abort)
    {
        status.Event(options.Replicas > 0
            ? $"starting {options.Stores} bookstores, PriceGrabber, TaxCalculator and BookSeller, each persistent one a primary and {options.Replicas.ToString(CultureInfo.InvariantCulture)} replicas{(options.Replicas == 1 ? " and a witness" : "")} (Raft failover), each its own process …"
            : $"starting {options.Stores} bookstores, PriceGrabber, TaxCalculator and BookSeller, each its own process …");
        var deployment = await Deployment.StartAsync(root, options.Stores, options.Configuration, status.Event, abort, options.Gateway, options.Replicas);
        deployment.WipeOnRestart = options.WipeOnRestart;
        started(deployment);
        foreach (var service in deployment.Services)
        {
            status.Event($"{service.Name} ({service.Kind}{(service.Node == 0 ? ", the initial primary" : service.Node > 0 ? ", a replica" : "")}) on {service.Url.Authority}, pid {service.ProcessId.ToString(CultureInfo.InvariantCulture)}");
        }

        if (deployment.Gateway is { } gateway)
        {
            status.Event($"gateway on {gateway.Url.Authority} (pid {gateway.ProcessId.ToString(CultureInfo.InvariantCulture)}): the buyer reaches PriceGrabber and BookSeller through it");
        }

        status.Event($"all {deployment.Services.Count} services ready in {status.Clock.Elapsed.TotalSeconds:0.0} s");

        // Each buyer has its own sessions at PriceGrabber and BookSeller (its own basket).
        var clients = new List<SessionClient>();
        var buyers = new List<BookBuyer>();
        for (var i = 0; i < options.Buyers; i++)
        {
            // With replicas (and no gateway) each client follows its service's group to the primary.
            var priceGrabber = new SessionClient("pricegrabber", deployment.BuyerUrl(deployment.PriceGrabber), plain: options.PlainClients, groups: deployment.ReplicationGroups);
            var seller = new SessionClient("bookseller", deployment.BuyerUrl(deployment.Seller), plain: options.PlainClients, groups: deployment.ReplicationGroups);
            clients.Add(priceGrabber);
            clients.Add(seller);
            buyers.Add(new BookBuyer(priceGrabber, seller, [.. deployment.Stores.Select(s => s.Service)]));
        }

        using var disposeClients = new Disposables(clients);
        foreach (var buyer in buyers)
        {
            await buyer.StartAsync(abort);
        }

        var before = await Reconciliation.ReadAsync(deployment, abort);
        var forcesBefore = await deployment.ReadForcesAsync(abort);
        outcome.Buyers = buyers;

        status.Phase = "running";
        using var background = CancellationTokenSource.CreateLinkedTokenSource(abort);
        var polling = PollForcesAsync(deployment, status, background.Token);
        // One disruption at a time: a kill during an upgrade's drain would make the new build replay the old one's requests.
        using var disruption = new SemaphoreSlim(1, 1);
        var chaos = options.Chaos ? ChaosAsync(deployment, new Random(options.Seed), options.ChaosInterval, options.LoseNode, status, disruption, background.Token) : Task.CompletedTask;
        var upgrades = options.Upgrade ? UpgradeAsync(deployment, status, disruption, background.Token) : Task.CompletedTask;
        var deadline = options.Seconds is { } seconds ? TimeSpan.FromSeconds(seconds) : (TimeSpan?)null;
        var loopsStarted = status.Clock.Elapsed;
        var loops = 0;
        async Task BuyAsync(BookBuyer buyer)
        {
            while (!finish.IsCancellationRequested
                   && (deadline is { } d ? status.Clock.Elapsed - loopsStarted < d : Interlocked.Increment(ref loops) <= options.Loops)
                   && chaos is not { IsFaulted: true } && upgrades is not { IsFaulted: true })
            {
                await buyer.RunLoopAsync(status.Step, abort);
                status.Retries = buyers.Sum(b => b.Retries);
            }
        }

        try
        {
            await Task.WhenAll(buyers.Select(BuyAsync));
        }
        finally
        {
            await background.CancelAsync();
            await Task.WhenAll(chaos, polling, upgrades).ContinueWith(_ => { }, CancellationToken.None, TaskContinuationOptions.None, TaskScheduler.Default);
        }

        if (upgrades.IsFaulted)
        {
            throw new InvalidOperationException("an upgrade failed: " + upgrades.Exception!.InnerException!.Message);
        }

        outcome.LoopTime = status.Clock.Elapsed - loopsStarted;
        status.Phase = "reconciling";
        var waited = System.Diagnostics.Stopwatch.StartNew();
        while (!deployment.AllReady && waited.Elapsed < TimeSpan.FromMinutes(1))
        {
            await Task.Delay(100, abort);
        }

        var after = await Reconciliation.ReadAsync(deployment, abort);
        outcome.Result = await Reconciliation.CheckAsync(before, after, buyers, abort);
        var forcesAfter = await deployment.ReadForcesAsync(abort);
        outcome.Forces = forcesAfter.Zip(forcesBefore, (a, b) => (a.Service, Forces: a.TotalForces - b.TotalForces, Commits: a.Commits - b.Commits)).ToList();
        outcome.Crashes = deployment.Crashes;
        outcome.Upgrades = deployment.Upgrades;
        outcome.Failovers = deployment.Failovers;
        outcome.FailoverTimes = [.. deployment.FailoverTimes];
        outcome.LostNodes = deployment.LostNodes;
        outcome.FencedRestarts = deployment.FencedRestarts;
        outcome.Latency = Latency.Measure([.. clients.SelectMany(c => c.Requests)], deployment.Outages);
        outcome.ClientErrors = clients.Sum(c => c.ClientErrors);
        outcome.ErrorSamples = [.. clients.SelectMany(c => c.ErrorSamples).Take(5)];
        status.Phase = "done";
        status.Event(outcome.Result.Mismatches.Count == 0 && outcome.Result.Duplicates == 0
            ? $"reconciled: the services' state is exactly what the buyers were told ({buyers.Sum(b => b.Loops)} loops)"
            : $"reconciliation found {outcome.Result.Mismatches.Count} mismatches and {outcome.Result.Duplicates} duplicate executions");
    }

    /// <summary>Refreshes the display's force counters once a second (a service that is down keeps its last figures).</summary>
    private static async Task PollForcesAsync(Deployment deployment, RunStatus status, CancellationToken cancellationToken)
    {
        using var http = new HttpClient { Timeout = TimeSpan.FromSeconds(1) };
        using var timer = new PeriodicTimer(TimeSpan.FromSeconds(1));
        try
        {
            while (await timer.WaitForNextTickAsync(cancellationToken))
            {
                var forces = new Dictionary<string, ForceCounts>(status.Forces);
                foreach (var service in deployment.Services.Where(s => s.State == ComponentState.Ready))
                {
                    try
                    {
                        forces[service.Name] = (await http.GetFromJsonAsync<ForceCounts>(new Uri(service.Url, "/diagnostics/forces"), cancellationToken))!;
                    }
                    catch (Exception ex) when (ex is HttpRequestException or TaskCanceledException && !cancellationToken.IsCancellationRequested)
                    {
                    }
                }

                status.Forces = forces;
            }
        }
        catch (OperationCanceledException) when (cancellationToken.IsCancellationRequested)
        {
        }
    }

    /// <summary>Kills one ready service at a time, at random, while the buyer runs; the supervisor brings it back.</summary>
    private static async Task ChaosAsync(Deployment deployment, Random random, (double Min, double Max) interval, bool loseNode, RunStatus status, SemaphoreSlim disruption, CancellationToken cancellationToken)
    {
        try
        {
            while (!cancellationToken.IsCancellationRequested)
            {
                // The interval counts from the moment every service is up again: a restart takes seconds here, and a
                // kill right after it would leave the buyer no time to get anything done between kills.
                await WhenAllReadyAsync(deployment, cancellationToken);
                await Task.Delay(TimeSpan.FromSeconds(interval.Min + (random.NextDouble() * (interval.Max - interval.Min))), cancellationToken);
                await disruption.WaitAsync(cancellationToken);
                try
                {
                    await WhenAllReadyAsync(deployment, cancellationToken);

                    // With --wipe-on-restart only stores: a BookSeller that forgot would forget the buyer's session too (404).
                    // With replicas only the replicated services, each through its primary (its status says which): the
                    // point is the failover. Without, any service.
                    List<ComponentProcess> candidates = deployment.WipeOnRestart ? [.. deployment.Stores]
                        : deployment.Groups.Count > 0 ? [.. deployment.Heads.Where(h => deployment.Groups.ContainsKey(h.Service))]
                        : [.. deployment.Heads];
                    var victim = candidates[random.Next(candidates.Count)];
                    if (deployment.Groups.ContainsKey(victim.Service))
                    {
                        var primary = deployment.PrimaryOf(victim.Service);
                        status.Killed();
                        status.Event($"chaos: SIGKILL {victim.Service}'s primary {primary?.Name} (pid {primary?.ProcessId.ToString(CultureInfo.InvariantCulture)}){(loseNode ? ", its log directory to be deleted" : "")}");
                        await deployment.KillPrimaryAsync(victim.Service, loseNode);
                    }
                    else
                    {
                        status.Killed();
                        status.Event($"chaos: SIGKILL {victim.Name} (pid {victim.ProcessId.ToString(CultureInfo.InvariantCulture)})");
                        await victim.KillAsync();
                    }

                    // Back up (the supervisor restarts it) before the next disruption may begin.
                    await WhenAllReadyAsync(deployment, cancellationToken);
                }
                finally
                {
                    disruption.Release();
                }
            }
        }
        catch (OperationCanceledException) when (cancellationToken.IsCancellationRequested)
        {
        }
    }

    /// <summary>
    /// Replaces every service in turn by the next build (2, 3, …), round after round, while the buyer runs: each one is
    /// stopped gracefully (it drains and checkpoints) and started as the new build on the same port and log, a second
    /// after every service is up again. A replication group is upgraded as docs/upgrades.md says, its primary last: the
    /// replicas (and witness) one at a time, then the primary, whose SIGTERM hands its role to a caught-up upgraded replica
    /// (a switchover, after it checkpointed every session) before it exits; it comes back as a replica of the new build.
    /// </summary>
    private static async Task UpgradeAsync(Deployment deployment, RunStatus status, SemaphoreSlim disruption, CancellationToken cancellationToken)
    {
        try
        {
            for (var build = 2; !cancellationToken.IsCancellationRequested; build++)
            {
                var upgraded = new HashSet<ComponentProcess>();
                while (true)
                {
                    await WhenAllReadyAsync(deployment, cancellationToken);
                    await Task.Delay(TimeSpan.FromSeconds(1), cancellationToken);
                    await disruption.WaitAsync(cancellationToken);
                    try
                    {
                        await WhenAllReadyAsync(deployment, cancellationToken);
                        if (NextToUpgrade(deployment, upgraded) is not { } service)
                        {
                            break;
                        }

                        upgraded.Add(service);
                        var primary = deployment.Groups.ContainsKey(service.Service) && ReferenceEquals(deployment.PrimaryOf(service.Service), service);
                        status.Event($"upgrade: {service.Name} to build {build.ToString(CultureInfo.InvariantCulture)} ({(primary ? "SIGTERM: switchover to an upgraded replica" : "SIGTERM, drain")}, start)");
                        await deployment.UpgradeAsync(service, build);
                    }
                    finally
                    {
                        disruption.Release();
                    }
                }
            }
        }
        catch (OperationCanceledException) when (cancellationToken.IsCancellationRequested)
        {
        }
    }

    /// <summary>
    /// The next process of this round's upgrade, in <see cref="Deployment.Services"/>' order, except that a group's primary
    /// (the node that is primary now) comes after every other node of its group; null when every process is upgraded.
    /// </summary>
    private static ComponentProcess? NextToUpgrade(Deployment deployment, HashSet<ComponentProcess> upgraded)
    {
        foreach (var service in deployment.Services.Where(s => !upgraded.Contains(s)))
        {
            if (!deployment.Groups.TryGetValue(service.Service, out var group))
            {
                return service;
            }

            var primary = deployment.PrimaryOf(service.Service);
            return group.FirstOrDefault(n => !upgraded.Contains(n) && !ReferenceEquals(n, primary)) ?? service;
        }

        return null;
    }

    private static async Task WhenAllReadyAsync(Deployment deployment, CancellationToken cancellationToken)
    {
        while (!deployment.AllReady)
        {
            await Task.Delay(50, cancellationToken);
        }
    }

    private static void Report(LauncherOptions options, string root, RunStatus status, Outcome outcome)
    {
        var buyers = outcome.Buyers;
        var loopCount = buyers.Sum(b => b.Loops);
        var resends = buyers.Sum(b => b.Retries);
        Console.WriteLine();
        if (outcome.Error is not null)
        {
            Console.WriteLine($"error: {outcome.Error}");
            Console.WriteLine($"(each service's output is in {root}/<service>/service.log)");
        }

        if (outcome.Interrupted)
        {
            Console.WriteLine("interrupted during an operation: not reconciled (its outcome is unknown to the buyer).");
        }

        if (loopCount > 0)
        {
            var who = buyers.Count == 1 ? "BookBuyer" : $"{buyers.Count} BookBuyers at once";
            Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                $"{who}: {loopCount} loops in {outcome.LoopTime.TotalSeconds:0.0} s ({outcome.LoopTime.TotalMilliseconds / loopCount:0.0} ms per loop), {resends} resends, {status.Kills} services killed, {outcome.Crashes} restarted, {outcome.Upgrades} upgraded"));
        }

        if (outcome.Latency is { } latency)
        {
            Console.WriteLine(latency.Describe());
        }

        if (options.Upgrade && loopCount > 0)
        {
            Console.WriteLine($"BookSeller's /basket/add replies came from builds {string.Join(", ", buyers.SelectMany(b => b.BuildsSeen).Distinct().Order())} (build 2 on add a field)");
        }

        if (options.PlainClients)
        {
            Console.WriteLine(outcome.ClientErrors == 0
                ? "plain clients: 0 errors (no request's first send failed or got a non-2xx answer)"
                : $"plain clients: {outcome.ClientErrors} errors a client that never retries would have shown, e.g. {string.Join("; ", outcome.ErrorSamples)}");
        }

        if (options.Replicas > 0 && loopCount > 0)
        {
            var times = outcome.FailoverTimes.Order().ToList();
            Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                $"replication: each persistent service a primary and {(options.Replicas == 1 ? "1 replica and a witness" : $"{options.Replicas} replicas")} (Raft failover); {outcome.Failovers} failovers, {outcome.LostNodes} nodes back with their log directory deleted, {outcome.FencedRestarts} fenced old primaries restarted") +
                (times.Count > 0 ? string.Create(CultureInfo.InvariantCulture, $"; a primary's kill to its successor's promotion p50 {times[times.Count / 2]:0} ms, max {times[^1]:0} ms") : ""));
        }

        if (outcome.Forces is { } forces && loopCount > 0 && outcome.Crashes == 0 && outcome.Upgrades == 0)
        {
            Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                $"log forces per loop (configuration {options.Configuration.Key}): {forces.Sum(f => f.Forces) / (double)loopCount:0.0} = {string.Join(" + ", forces.Select(f => $"{f.Service} {f.Forces / (double)loopCount:0.#}"))}; physical commits {forces.Sum(f => f.Commits) / (double)loopCount:0.0}"));
        }

        if (outcome.Result is { } result)
        {
            foreach (var mismatch in result.Mismatches)
            {
                Console.WriteLine($"MISMATCH {mismatch}");
            }

            Console.WriteLine(result.Mismatches.Count == 0 && result.Duplicates == 0
                ? $"reconciled: baskets, stock, sold and returned counts match what the buyer was told; {result.StoreExecutions} store calls and {result.SellerExecutions} BookSeller requests each executed once" +
                  (options.Replicas > 0 ? $"; nothing acknowledged was lost or run twice through {outcome.Failovers} failovers" : "")
                : $"NOT reconciled: {result.Mismatches.Count} mismatches, {result.Duplicates} duplicate executions");
            Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                $"RESULT loops={loopCount} kills={status.Kills} restarts={outcome.Crashes} upgrades={outcome.Upgrades} mismatches={result.Mismatches.Count} duplicates={result.Duplicates} store_executions={result.StoreExecutions} seller_executions={result.SellerExecutions} resends={resends} client_errors={(options.PlainClients ? outcome.ClientErrors.ToString(CultureInfo.InvariantCulture) : "-")}") +
                (options.Replicas > 0 ? string.Create(CultureInfo.InvariantCulture, $" replicas={options.Replicas} failovers={outcome.Failovers} lost_nodes={outcome.LostNodes} fenced_restarts={outcome.FencedRestarts}") : ""));
        }
    }

    private sealed class Outcome
    {
        public IReadOnlyList<BookBuyer> Buyers { get; set; } = [];

        public Reconciliation.Result? Result { get; set; }

        public IReadOnlyList<(string Service, long Forces, long Commits)>? Forces { get; set; }

        public TimeSpan LoopTime { get; set; }

        public int Crashes { get; set; }

        public int Upgrades { get; set; }

        public int Failovers { get; set; }

        public List<double> FailoverTimes { get; set; } = [];

        public int LostNodes { get; set; }

        public int FencedRestarts { get; set; }

        public Latency? Latency { get; set; }

        public int ClientErrors { get; set; }

        public List<string> ErrorSamples { get; set; } = [];

        public bool Interrupted { get; set; }

        public string? Error { get; set; }
    }

    private sealed class Disposables(IEnumerable<IDisposable> items) : IDisposable
    {
        public void Dispose()
        {
            foreach (var item in items)
            {
                item.Dispose();
            }
        }
    }
}
