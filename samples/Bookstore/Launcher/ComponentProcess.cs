using System.Diagnostics;
using System.Globalization;
using System.Net;

namespace Bookstore.Launcher;

/// <summary>What a component process is doing, as the launcher sees it.</summary>
internal enum ComponentState
{
    Starting,
    Ready,
    Down,
    Stopped,
}

/// <summary>
/// One service of the deployment as a child process of the launcher (this executable with <c>serve &lt;component&gt;</c>):
/// on its own loopback port, with its own directory (the log in <c>log/</c>, its console output in <c>service.log</c>,
/// appended across restarts). Killed with SIGKILL, restarted on the same port and directory.
/// </summary>
internal sealed class ComponentProcess(string name, string component, string kind, int port, string directory, IReadOnlyDictionary<string, string> environment)
{
    private const string Setsid = "/usr/bin/setsid";

    private readonly object _gate = new();
    private readonly Dictionary<string, string> _environment = new(environment);
    private Process? _process;
    private StreamWriter? _output;

    /// <summary>This process's name: the service's, or with replicas the service's and its node's (<c>store-1.0</c>, <c>store-1.w</c>).</summary>
    public string Name => name;

    /// <summary>The service it is (or is a node of): its <c>ServiceName</c>, what callers and the reconciliation know it by.</summary>
    public string Service { get => field ?? Name; init; }

    /// <summary>With <c>--replicas</c>: its group's log nodes' base addresses (the same list on every node, witness included); null without.</summary>
    public IReadOnlyList<Uri>? Group { get; init; }

    /// <summary>Its index among <see cref="Group"/>'s log nodes (0 starts as the primary), or -1 for the witness and for a service without replicas.</summary>
    public int Node { get; init; } = -1;

    /// <summary>A node of a replication group (a log node or the witness): it is up once live (a replica is never ready: it serves nothing).</summary>
    public bool IsNode => Group is not null;

    /// <summary>A witness of its group (<c>--replicas 1</c>): a Raft voter without a log, never a primary.</summary>
    public bool IsWitness => IsNode && Node < 0;

    /// <summary>What this node last said of itself (<c>GET /ps/replication/status</c>, the launcher's monitor), or null.</summary>
    public NodeStatus? Observed { get; set; }

    /// <summary>Set by the chaos monkey before it kills this node as its group's primary: its supervisor waits for the failover before the restart.</summary>
    public bool KilledAsPrimary { get; set; }

    /// <summary>Set with <c>--lose-node</c>: the next restart deletes the log directory first (a lost node).</summary>
    public bool LoseLogOnRestart { get; set; }

    public string Component => component;

    /// <summary>Its role in the paper's terms (persistent, read-only, functional), for the display.</summary>
    public string Kind => kind;

    public int Port => port;

    public Uri Url { get; } = new($"http://127.0.0.1:{port.ToString(CultureInfo.InvariantCulture)}");

    public string Directory => directory;

    public ComponentState State { get; private set; } = ComponentState.Stopped;

    /// <summary>Being replaced by a new build (<c>--upgrade</c>): its supervisor leaves the stop and the start to the upgrade.</summary>
    public bool Replacing { get; set; }

    /// <summary>When the launcher first saw this node fenced (a <see cref="System.Diagnostics.Stopwatch"/> timestamp), 0 while it is not.</summary>
    public long FencedSince { get; set; }

    /// <summary>The build the next start runs (<c>Bookstore__Build</c>, <see cref="Services.ComponentSettings.Build"/>).</summary>
    public int Build => _environment.TryGetValue("Bookstore__Build", out var build) ? int.Parse(build, CultureInfo.InvariantCulture) : 1;

    /// <summary>Sets the build the next start runs.</summary>
    public void SetBuild(int build) => _environment["Bookstore__Build"] = build.ToString(CultureInfo.InvariantCulture);

    public int ProcessId { get; private set; }

    /// <summary>Starts after the first (restarts after a kill or a crash).</summary>
    public int Restarts { get; private set; }

    /// <summary>How long its last start took until ready (log opened and scanned).</summary>
    public TimeSpan LastStart { get; private set; }

    /// <summary>CPU time the current process has used (user and system).</summary>
    public TimeSpan ProcessorTime
    {
        get
        {
            var process = _process;
            if (process is null)
            {
                return TimeSpan.Zero;
            }

            process.Refresh();
            return process.TotalProcessorTime;
        }
    }

    /// <summary>Starts the process; returns once it is ready, or throws when it exits or is not ready within a minute.</summary>
    public async Task StartAsync(CancellationToken cancellationToken)
    {
        var clock = Stopwatch.StartNew();
        Process process;
        lock (_gate)
        {
            if (_process is not null)
            {
                Restarts++;
            }

            // In a session of its own (setsid): a Ctrl+C in the terminal reaches only the launcher, which then stops the
            // services itself, after the buyer's current loop.
            var (file, prefix) = SelfCommand();
            if (File.Exists(Setsid))
            {
                prefix = [file, .. prefix];
                file = Setsid;
            }

            var start = new ProcessStartInfo(file)
            {
                RedirectStandardOutput = true,
                RedirectStandardError = true,
                RedirectStandardInput = true,
                UseShellExecute = false,
            };
            foreach (var argument in prefix.Concat(["serve", component]))
            {
                start.ArgumentList.Add(argument);
            }

            foreach (var (key, value) in _environment)
            {
                start.Environment[key] = value;
            }

            start.Environment["ASPNETCORE_URLS"] = Url.ToString();
            start.Environment["DOTNET_NOLOGO"] = "1";
            start.Environment["ASPNETCORE_ENVIRONMENT"] = "Production";
            System.IO.Directory.CreateDirectory(directory);
            _output ??= new StreamWriter(new FileStream(Path.Combine(directory, "service.log"), FileMode.Append, FileAccess.Write, FileShare.ReadWrite)) { AutoFlush = true };
            _output.WriteLine($"---- {DateTimeOffset.Now:yyyy-MM-dd HH:mm:ss.fff} launcher: starting {name} ({component}) on {Url}");
            process = Process.Start(start) ?? throw new InvalidOperationException($"could not start {name}");
            process.OutputDataReceived += (_, e) => Write(e.Data);
            process.ErrorDataReceived += (_, e) => Write(e.Data);
            process.BeginOutputReadLine();
            process.BeginErrorReadLine();
            _process = process;
            ProcessId = process.Id;
            State = ComponentState.Starting;
        }

        using var http = new HttpClient { Timeout = TimeSpan.FromSeconds(2) };
        var deadline = clock.Elapsed + TimeSpan.FromMinutes(1);
        while (clock.Elapsed < deadline)
        {
            if (process.HasExited)
            {
                State = ComponentState.Down;
                throw new InvalidOperationException($"{name} exited with {process.ExitCode} before it was ready: see {Path.Combine(directory, "service.log")}");
            }

            try
            {
                // A node of a replication group is up once live: a replica's readiness stays unhealthy (it serves nothing), and a
                // primary's follows soon after (the monitor tells which is which).
                using var response = await http.GetAsync(new Uri(Url, IsNode ? "/health/live" : "/health/ready"), cancellationToken);
                if (response.StatusCode == HttpStatusCode.OK)
                {
                    LastStart = clock.Elapsed;
                    State = ComponentState.Ready;
                    LastKill = null;
                    return;
                }
            }
            catch (Exception ex) when (ex is HttpRequestException or TaskCanceledException && !cancellationToken.IsCancellationRequested)
            {
            }

            await Task.Delay(50, cancellationToken);
        }

        throw new TimeoutException($"{name} was not ready within a minute: see {Path.Combine(directory, "service.log")}");
    }

    /// <summary>Whether a start is under way or done and the process has not exited (a restart is not needed).</summary>
    public bool Running => _process is { HasExited: false };

    /// <summary>Completes when the current process exits (by itself, a kill, or a stop); its exit code.</summary>
    public async Task<int> WaitForExitAsync(CancellationToken cancellationToken)
    {
        var process = _process ?? throw new InvalidOperationException("not started");
        await process.WaitForExitAsync(cancellationToken);
        lock (_gate)
        {
            if (ReferenceEquals(process, _process) && State != ComponentState.Stopped)
            {
                State = ComponentState.Down;
            }
        }

        return process.ExitCode;
    }

    /// <summary>The exit code of the process that ran last, once it exited (null while it runs).</summary>
    public int? ExitCode => _process is { HasExited: true } process ? process.ExitCode : null;

    /// <summary>When the launcher last killed it (a <see cref="Stopwatch"/> timestamp), or null.</summary>
    public long? LastKill { get; private set; }

    /// <summary>SIGKILL: no shutdown code runs (the crash the library recovers from).</summary>
    public async Task KillAsync()
    {
        var process = _process;
        if (process is null || process.HasExited)
        {
            return;
        }

        LastKill = Stopwatch.GetTimestamp();
        Write($"---- {DateTimeOffset.Now:HH:mm:ss.fff} launcher: SIGKILL");
        lock (_gate)
        {
            // Down before the kill, not when the supervisor's wait for the exit runs: in between, AllReady would still say
            // yes, and the end of a run would reconcile against a service that is not there (connection refused).
            if (ReferenceEquals(process, _process) && State != ComponentState.Stopped)
            {
                State = ComponentState.Down;
            }
        }

        process.Kill();
        await process.WaitForExitAsync();
    }

    /// <summary>SIGTERM (a graceful stop: the service drains and checkpoints), then SIGKILL after <paramref name="grace"/>.</summary>
    public async Task StopAsync(TimeSpan grace)
    {
        State = ComponentState.Stopped;
        var process = _process;
        if (process is not null && !process.HasExited)
        {
            try
            {
                using var kill = Process.Start("kill", ["-TERM", process.Id.ToString(CultureInfo.InvariantCulture)]);
                await kill.WaitForExitAsync();
                using var timeout = new CancellationTokenSource(grace);
                await process.WaitForExitAsync(timeout.Token);
            }
            catch (Exception ex) when (ex is OperationCanceledException or System.ComponentModel.Win32Exception or InvalidOperationException)
            {
                if (!process.HasExited)
                {
                    process.Kill();
                    await process.WaitForExitAsync();
                }
            }
        }

        lock (_gate)
        {
            _output?.Dispose();
            _output = null;
        }
    }

    /// <summary>How to start this executable again: its apphost, or <c>dotnet Bookstore.dll</c> when run that way.</summary>
    private static (string File, string[] Prefix) SelfCommand()
    {
        var host = Environment.ProcessPath ?? "dotnet";
        return Path.GetFileNameWithoutExtension(host) == "dotnet"
            ? (host, [typeof(ComponentProcess).Assembly.Location])
            : (host, []);
    }

    private void Write(string? line)
    {
        if (line is null)
        {
            return;
        }

        lock (_gate)
        {
            _output?.WriteLine(line);
        }
    }
}

/// <summary>
/// What a node of a replication group says of itself (<c>GET /ps/replication/status</c>): its role and term; a replica's
/// durable end (null on a fenced primary, which has a replica's role and no replica's log until it has demoted itself);
/// on a primary, how many of its replicas are streaming (caught up).
/// </summary>
internal sealed record NodeStatus(string Role, long Term, long? DurableUntil, int Streaming)
{
    public bool Fenced => Role == "Replica" && DurableUntil is null;

    public static NodeStatus Parse(System.Text.Json.JsonElement status)
    {
        var role = status.GetProperty("role").GetString() ?? "";
        long? durable = status.TryGetProperty("replica", out var replica) && replica.ValueKind == System.Text.Json.JsonValueKind.Object
            ? replica.GetProperty("durableUntil").GetInt64()
            : null;
        var streaming = status.TryGetProperty("primary", out var primary) && primary.ValueKind == System.Text.Json.JsonValueKind.Object
            ? primary.GetProperty("replicas").EnumerateArray().Count(r => r.GetProperty("state").GetString() == "streaming")
            : 0;
        return new NodeStatus(role, status.GetProperty("term").GetInt64(), durable, streaming);
    }
}
