using System.Diagnostics;
using System.Globalization;
using System.Net;
using System.Net.Sockets;

namespace PersistentServices.CrashHarness;

/// <summary>
/// One run: start the service, run the client sessions, SIGKILL and restart the service again and again, let the
/// clients finish their in-flight operation, verify every session's state, print the summary.
/// </summary>
internal sealed class Harness
{
    private readonly Options _options;
    private readonly RunStats _stats = new();
    private readonly List<double> _readyMs = [];
    private readonly Stopwatch _clock = new();
    private int _kills;
    private IReadOnlyList<string> _outputAtFirstViolation = [];

    public Harness(Options options) => _options = options;

    /// <summary>Runs everything; returns the process exit code (0 passed, 1 failed).</summary>
    public async Task<int> RunAsync(CancellationToken cancellationToken)
    {
        _clock.Start();
        using var bound = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
        bound.CancelAfter(TimeSpan.FromSeconds(_options.MaxSeconds));
        var port = _options.Port != 0 ? _options.Port : FreeLoopbackPort();
        var ownsLogDirectory = _options.LogDirectory is null;
        var logDirectory = _options.LogDirectory ?? Directory.CreateTempSubdirectory("ps-crash-").FullName;
        Directory.CreateDirectory(logDirectory);

        Console.WriteLine($"ps-crash-harness: seed {_options.Seed}, service '{_options.Service} {string.Join(' ', _options.ServiceArgs)}' " +
            $"on 127.0.0.1:{port}, log {logDirectory}, {_options.Sessions} sessions, {_options.Kills} kills, at most {_options.MaxSeconds} s, " +
            $"uptime {_options.MinUptimeMs}-{_options.MaxUptimeMs} ms");

        var sessions = new List<ClientSession>();
        var verdicts = new List<Verdict>();
        var stopReason = "";
        var showOutput = false;
        using var service = new ServiceProcess(_options, port);
        _stats.OnFirstViolation = () => _outputAtFirstViolation = service.RecentOutput();
        try
        {
            _stats.ServiceStarting(1);
            _readyMs.Add((await service.StartAsync(LogDirectoryFor(logDirectory, 0), bound.Token).ConfigureAwait(false)).TotalMilliseconds);
            Console.WriteLine($"service ready after {_readyMs[0]:F0} ms");

            using var handler = new SocketsHttpHandler { ConnectTimeout = TimeSpan.FromMilliseconds(_options.RequestTimeoutMs) };
            using var http = new HttpClient(handler) { BaseAddress = service.BaseAddress, Timeout = Timeout.InfiniteTimeSpan };
            using var stopNewOps = new CancellationTokenSource();
            using var stopClients = CancellationTokenSource.CreateLinkedTokenSource(bound.Token);
            for (var i = 0; i < _options.Sessions; i++)
            {
                sessions.Add(new ClientSession(i, _options, http, _stats));
            }

            var clients = sessions.Select(s => Task.Run(() => s.RunAsync(stopNewOps.Token, stopClients.Token), CancellationToken.None)).ToList();

            bool serviceUp;
            (stopReason, serviceUp) = await KillLoopAsync(service, logDirectory, sessions, http, bound.Token).ConfigureAwait(false);
            showOutput = !serviceUp;
            Console.WriteLine($"stop reason: {stopReason} after {_kills} kills at {_clock.Elapsed.TotalSeconds:F1} s; letting clients finish their in-flight op");

            // Clients finish the operation they are on (bounded), then stop. The service was just restarted, so on a slow
            // machine the first replies may take seconds; an op abandoned here would leave its effect unexplained (the
            // inventory checker would then report tickets nobody acknowledged), so the bound is generous and an op still
            // unanswered at its end is reported as what it is: a liveness failure.
            stopNewOps.Cancel();
            var drain = TimeSpan.FromMilliseconds(Math.Max(60_000, 3 * _options.RequestTimeoutMs));
            var all = Task.WhenAll(clients);
            if (!serviceUp || await Task.WhenAny(all, Task.Delay(drain, bound.Token)).ConfigureAwait(false) != all)
            {
                if (serviceUp)
                {
                    foreach (var session in sessions.Where(s => s.InFlight is not null))
                    {
                        _stats.Violation($"session {session.Id}: op {session.InFlight!.Value.OpId} still unanswered {drain.TotalSeconds:F0} s after the last restart (abandoned)");
                    }
                }

                await stopClients.CancelAsync().ConfigureAwait(false);
            }

            await AwaitClientsAsync(clients).ConfigureAwait(false);

            if (serviceUp && service.HasExited)
            {
                _stats.Violation($"the service exited by itself with code {service.ExitCode} (start #{service.Starts}), without being killed");
                serviceUp = false;
                showOutput = true;
            }

            if (serviceUp && !bound.IsCancellationRequested)
            {
                foreach (var session in sessions)
                {
                    verdicts.Add(await session.VerifyAsync(bound.Token).ConfigureAwait(false));
                }

                if (_options.Scenario == Scenario.Inventory)
                {
                    verdicts.Add(await InventoryChecker.VerifyAsync(http, _options, [.. sessions.SelectMany(s => s.InventoryAcks)], bound.Token).ConfigureAwait(false));
                }
            }
            else
            {
                _stats.Violation("final verification skipped: the service was not running or the time bound was reached");
            }
        }
        catch (InvalidOperationException ex)
        {
            _stats.Violation($"harness: {ex.Message}");
            showOutput = true;
        }
        catch (OperationCanceledException) when (bound.IsCancellationRequested)
        {
            _stats.Violation(cancellationToken.IsCancellationRequested ? "harness: interrupted" : $"harness: the time bound of {_options.MaxSeconds} s was reached before verification ended");
            showOutput = true;
        }
        finally
        {
            service.Dispose();
            if (ownsLogDirectory && !_options.Keep)
            {
                TryDelete(logDirectory);
            }
        }

        return Report(service, sessions, verdicts, stopReason, showOutput);
    }

    private async Task<(string Reason, bool ServiceUp)> KillLoopAsync(
        ServiceProcess service, string logDirectory, List<ClientSession> sessions, HttpClient http, CancellationToken cancellationToken)
    {
        // Leave time at the end for the clients to finish and for the verification.
        var killPhase = TimeSpan.FromSeconds(_options.MaxSeconds - Math.Clamp(_options.MaxSeconds / 5, 2, 60));
        var random = new Random(unchecked(_options.Seed ^ 0x5bd1e995));
        while (_kills < _options.Kills)
        {
            var left = killPhase - _clock.Elapsed;
            if (left <= TimeSpan.Zero)
            {
                return ("time bound", true);
            }

            var uptime = TimeSpan.FromMilliseconds(random.Next(_options.MinUptimeMs, _options.MaxUptimeMs + 1));
            try
            {
                await Task.Delay(uptime < left ? uptime : left, cancellationToken).ConfigureAwait(false);
            }
            catch (OperationCanceledException) when (cancellationToken.IsCancellationRequested)
            {
                return ("interrupted", true);
            }

            if (uptime >= left)
            {
                return ("time bound", true);
            }

            if (service.HasExited)
            {
                _stats.Violation($"the service exited by itself with code {service.ExitCode} (start #{service.Starts}), without being killed");
                return ("service exited by itself", false);
            }

            try
            {
                // What was acknowledged before the kill must be there after the recovery (checked once it is ready).
                var acknowledgedBeforeKill = sessions.Select(s => s.LastInventoryAck).OfType<InventoryAck>().ToList();
                await service.KillAsync(cancellationToken).ConfigureAwait(false);
                _kills++;
                _stats.ServiceStarting(service.Starts + 1);
                var ready = await service.StartAsync(LogDirectoryFor(logDirectory, _kills), cancellationToken).ConfigureAwait(false);
                _readyMs.Add(ready.TotalMilliseconds);
                if (_options.Scenario == Scenario.Inventory)
                {
                    foreach (var violation in await InventoryChecker.CheckAfterRecoveryAsync(http, _options, acknowledgedBeforeKill, _kills, cancellationToken).ConfigureAwait(false))
                    {
                        _stats.Violation(violation);
                    }
                }

                if (_options.Verbose || _kills % 10 == 0)
                {
                    Console.WriteLine($"kill {_kills} after {uptime.TotalMilliseconds:F0} ms up; ready again after {ready.TotalMilliseconds:F0} ms; " +
                        $"{_stats[Counter.Acknowledged]} ops acknowledged, {_stats.Violations.Count} violations so far, {_clock.Elapsed.TotalSeconds:F1} s");
                }
            }
            catch (InvalidOperationException ex)
            {
                _stats.Violation($"restart after kill {_kills}: {ex.Message}");
                return ("service did not restart", false);
            }
            catch (OperationCanceledException) when (cancellationToken.IsCancellationRequested)
            {
                return ("interrupted or hard time bound reached while killing or restarting", false);
            }
        }

        return ("kills reached", true);
    }

    private string LogDirectoryFor(string logDirectory, int kills)
    {
        if (!_options.FreshLogEachRestart)
        {
            return logDirectory;
        }

        // Self-test only: a new, empty log directory on every start, so the service forgets everything.
        var fresh = Path.Combine(logDirectory, $"fresh-{kills.ToString(CultureInfo.InvariantCulture)}");
        Directory.CreateDirectory(fresh);
        return fresh;
    }

    private async Task AwaitClientsAsync(List<Task> clients)
    {
        foreach (var client in clients)
        {
            try
            {
                await client.ConfigureAwait(false);
            }
            catch (Exception ex) when (ex is not OutOfMemoryException)
            {
                _stats.Violation($"harness: a client session failed: {ex}");
            }
        }
    }

    private int Report(ServiceProcess service, List<ClientSession> sessions, List<Verdict> verdicts, string stopReason, bool showOutput)
    {
        var lost = verdicts.Sum(v => v.Lost);
        var duplicated = verdicts.Sum(v => v.Duplicated);
        var violations = _stats.Violations.Concat(verdicts.SelectMany(v => v.Violations)).ToList();
        var acknowledged = _stats[Counter.Acknowledged];
        var passed = lost == 0 && duplicated == 0 && violations.Count == 0 && _kills > 0 && acknowledged > 0;

        foreach (var finding in verdicts.SelectMany(v => v.Findings).Take(100))
        {
            Console.WriteLine(finding);
        }

        foreach (var violation in violations.Take(100))
        {
            Console.WriteLine($"VIOLATION {violation}");
        }

        if (_outputAtFirstViolation.Count > 0)
        {
            Console.WriteLine("---- the service's output when the first violation was seen ----");
            foreach (var line in _outputAtFirstViolation)
            {
                Console.WriteLine(line);
            }
        }

        if (showOutput || !passed)
        {
            Console.WriteLine("---- last lines of the service's output ----");
            foreach (var line in service.RecentOutput())
            {
                Console.WriteLine(line);
            }

            Console.WriteLine("---- end of the service's output ----");
        }

        // Repeated after the service's output, so that a reader of only the last lines (a CI log) still sees them.
        foreach (var violation in violations.Take(5))
        {
            Console.WriteLine($"first violations: {violation}");
        }

        var firstAcks = _stats.FirstAckMs.Where(f => f.Start > 1).Select(f => f.Ms);
        Console.WriteLine($"seed: {_options.Seed}");
        Console.WriteLine($"stop reason: {(stopReason.Length == 0 ? "failure" : stopReason)}");
        Console.WriteLine($"kills: {_kills}");
        Console.WriteLine($"service starts: {service.Starts} (restarts {Math.Max(0, service.Starts - 1)})");
        Console.WriteLine($"sessions: {sessions.Count} (started {_stats[Counter.SessionsStarted]}, state checked {verdicts.Count})");
        Console.WriteLine($"requests sent: {_stats[Counter.RequestsSent]}");
        Console.WriteLine($"acknowledged ops: {acknowledged} (replayed replies {_stats[Counter.Replayed]})");
        Console.WriteLine($"retries: timeout {_stats[Counter.RetryTimeout]}, refused {_stats[Counter.RetryRefused]}, reset {_stats[Counter.RetryReset]}, " +
            $"503 {_stats[Counter.RetryUnavailable]}, 429 {_stats[Counter.RetryTooMany]}");
        Console.WriteLine($"restart to ready ms: {Spread(_readyMs.Skip(1))} (first start {_readyMs.FirstOrDefault():F0})");
        Console.WriteLine($"restart to first acknowledged op ms: {Spread(firstAcks)}; service starts that acknowledged nothing: {service.Starts - _stats.FirstAckMs.Count}");
        Console.WriteLine($"op acknowledgement wait ms (first send to reply, across kills): {Spread(_stats.AckWaitMs)}");
        Console.WriteLine($"lost: {lost}");
        Console.WriteLine($"duplicated: {duplicated}");
        Console.WriteLine($"unacknowledged but applied: {verdicts.Count(v => v.UnacknowledgedApplied)}");
        Console.WriteLine($"violations: {violations.Count}");
        Console.WriteLine($"elapsed: {_clock.Elapsed.TotalSeconds:F1} s");
        Console.WriteLine($"RESULT kills={_kills} acknowledged={acknowledged} lost={lost} duplicated={duplicated} violations={violations.Count}");
        return passed ? 0 : 1;
    }

    private static string Spread(IEnumerable<double> values)
    {
        var sorted = values.Order().ToList();
        return sorted.Count == 0 ? "none" : $"min {sorted[0]:F0} median {sorted[sorted.Count / 2]:F0} p99 {sorted[Math.Min(sorted.Count - 1, sorted.Count * 99 / 100)]:F0} max {sorted[^1]:F0}";
    }

    private static int FreeLoopbackPort()
    {
        using var listener = new TcpListener(IPAddress.Loopback, 0);
        listener.Start();
        return ((IPEndPoint)listener.LocalEndpoint).Port;
    }

    private static void TryDelete(string directory)
    {
        for (var attempt = 0; attempt < 3; attempt++)
        {
            try
            {
                Directory.Delete(directory, recursive: true);
                return;
            }
            catch (DirectoryNotFoundException)
            {
                return;
            }
            catch (Exception ex) when (ex is IOException or UnauthorizedAccessException)
            {
                Thread.Sleep(200);
            }
        }
    }
}
