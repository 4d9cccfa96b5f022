using System.Diagnostics;
using System.Globalization;
using System.Net;
using System.Net.Http.Json;
using System.Net.Sockets;
using System.Text;
using System.Text.Json;

namespace PersistentServices.Testing;

/// <summary>
/// A PersistentServices service under test, run as a child process (<c>dotnet MyService.dll</c>) on 127.0.0.1 and on a
/// temporary log directory: start it, talk to it through the session protocol (<see cref="StartSessionAsync"/>), kill it
/// with SIGKILL (<see cref="CrashAsync"/>: no shutdown code runs, and whatever the service had not made durable is gone,
/// exactly as after <c>kill -9</c>, because it is one), restart it on the same log and port
/// (<see cref="RestartAsync"/>) and assert on what it answers. docs/testing.md has a complete example.
/// </summary>
/// <example>
/// <code>
/// await using var app = await PersistentApp.StartAsync&lt;Program&gt;();
/// var session = await app.StartSessionAsync();
/// using var added = await session.PostAsync("/cart/items?sku=book");
/// await app.CrashAsync();
/// await app.RestartAsync();
/// using var again = await session.ResendAsync();          // the same number: answered from the log, not run again
/// Assert.Equal("true", again.Headers.GetValues("PS-Replayed").Single());
/// </code>
/// </example>
public sealed class PersistentApp : IAsyncDisposable
{
    private readonly PersistentAppOptions _options;
    private readonly bool _ownsLogDirectory;
    private readonly StringBuilder _output = new();
    private Process? _process;
    private bool _disposed;

    private PersistentApp(PersistentAppOptions options, string logDirectory, bool ownsLogDirectory, int port)
    {
        _options = options;
        LogDirectory = logDirectory;
        _ownsLogDirectory = ownsLogDirectory;
        BaseAddress = new Uri($"http://127.0.0.1:{port.ToString(CultureInfo.InvariantCulture)}");
        HttpClient = new HttpClient { BaseAddress = BaseAddress, Timeout = options.RequestTimeout };
    }

    /// <summary>The service's address, the same across restarts.</summary>
    public Uri BaseAddress { get; }

    /// <summary>A plain client with <see cref="BaseAddress"/>, for endpoints outside the session protocol.</summary>
    public HttpClient HttpClient { get; }

    /// <summary>The log directory the service runs on, the same across restarts.</summary>
    public string LogDirectory { get; }

    /// <summary>The current process's id, or null while the service is not running.</summary>
    public int? ProcessId => _process is { HasExited: false } p ? p.Id : null;

    /// <summary>Everything every start of the service wrote to stdout and stderr so far (for failure messages).</summary>
    public string Output
    {
        get
        {
            lock (_output)
            {
                return _output.ToString();
            }
        }
    }

    /// <summary>Starts the service whose entry point is <typeparamref name="TEntryPoint"/> (usually <c>Program</c>), as <see cref="StartAsync(PersistentAppOptions, CancellationToken)"/>.</summary>
    /// <typeparam name="TEntryPoint">A type of the service's entry assembly; the test project references the service's project.</typeparam>
    /// <param name="configure">Changes the options (log directory, environment, readiness path).</param>
    /// <param name="cancellationToken">Stops waiting for the service.</param>
    public static Task<PersistentApp> StartAsync<TEntryPoint>(Action<PersistentAppOptions>? configure = null, CancellationToken cancellationToken = default)
    {
        var options = new PersistentAppOptions { AppPath = typeof(TEntryPoint).Assembly.Location };
        configure?.Invoke(options);
        return StartAsync(options, cancellationToken);
    }

    /// <summary>
    /// Starts the service as a child process on a free port of 127.0.0.1 and waits until it is ready (its log opened and
    /// scanned). The service gets <c>--urls</c> and <c>PersistentServices:LogDirectory</c>; the kit checks that it used
    /// that log directory.
    /// </summary>
    /// <param name="options">How to start it; <see cref="PersistentAppOptions.AppPath"/> is required.</param>
    /// <param name="cancellationToken">Stops waiting for the service (the process is killed).</param>
    /// <exception cref="ArgumentException">The options are not valid.</exception>
    /// <exception cref="InvalidOperationException">The service exited before it was ready, or did not use the log directory.</exception>
    /// <exception cref="TimeoutException">The service was not ready within <see cref="PersistentAppOptions.StartTimeout"/>.</exception>
    public static async Task<PersistentApp> StartAsync(PersistentAppOptions options, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(options);
        options.Validate();
        var owns = options.LogDirectory is null;
        var logDirectory = options.LogDirectory is { } given
            ? Path.GetFullPath(given)
            : Directory.CreateTempSubdirectory("persistentservices-test-").FullName;
        var app = new PersistentApp(options, logDirectory, owns, FreePort());
        try
        {
            await app.LaunchAsync(cancellationToken).ConfigureAwait(false);
            if (!Directory.EnumerateFileSystemEntries(logDirectory).Any())
            {
                throw new InvalidOperationException(
                    $"The service is running but wrote nothing into the log directory the test gave it ('{logDirectory}'). It must take its " +
                    "log directory from configuration: builder.Services.AddPersistentServices(o => o.LogDirectory = " +
                    "builder.Configuration[\"PersistentServices:LogDirectory\"] ?? \"data/log\").\n" + app.Output);
            }

            return app;
        }
        catch
        {
            await app.DisposeAsync().ConfigureAwait(false);
            throw;
        }
    }

    /// <summary>Starts a session (<c>POST /ps/sessions</c>).</summary>
    /// <param name="sessionsPath">The service's <c>PersistentServicesOptions.SessionsPath</c>.</param>
    /// <param name="cancellationToken">Cancels the request.</param>
    /// <exception cref="HttpRequestException">The service did not answer 201.</exception>
    public async Task<PersistentTestSession> StartSessionAsync(string sessionsPath = "/ps/sessions", CancellationToken cancellationToken = default)
    {
        ObjectDisposedException.ThrowIf(_disposed, this);
        using var response = await HttpClient.PostAsync(new Uri(sessionsPath, UriKind.Relative), null, cancellationToken).ConfigureAwait(false);
        if (response.StatusCode != HttpStatusCode.Created)
        {
            throw new HttpRequestException(
                $"POST {sessionsPath} answered {(int)response.StatusCode}: {await response.Content.ReadAsStringAsync(cancellationToken).ConfigureAwait(false)}",
                null, response.StatusCode);
        }

        var body = await response.Content.ReadFromJsonAsync<JsonElement>(cancellationToken).ConfigureAwait(false);
        return new PersistentTestSession(HttpClient, body.GetProperty("sessionId").GetString()!);
    }

    /// <summary>
    /// Kills the service with SIGKILL (on Windows, TerminateProcess) and waits until it is gone: no shutdown code runs, no
    /// checkpoint is taken, and what the service had not made durable is lost as after <c>kill -9</c>. Requests in flight
    /// fail on the client side; resend them after <see cref="RestartAsync"/>.
    /// </summary>
    /// <param name="cancellationToken">Stops waiting for the process to exit.</param>
    public async Task CrashAsync(CancellationToken cancellationToken = default)
    {
        ObjectDisposedException.ThrowIf(_disposed, this);
        if (_process is { } process)
        {
            if (!process.HasExited)
            {
                process.Kill(entireProcessTree: true);
            }

            await process.WaitForExitAsync(cancellationToken).ConfigureAwait(false);
            process.Dispose();
            _process = null;
        }
    }

    /// <summary>
    /// Stops the service gracefully with SIGTERM, as Kubernetes does (running requests finish, sessions are checkpointed),
    /// and returns its exit code. On Windows, where there is no SIGTERM, this is <see cref="CrashAsync"/> and returns -1.
    /// </summary>
    /// <param name="cancellationToken">Stops waiting (the process is then killed).</param>
    public async Task<int> StopAsync(CancellationToken cancellationToken = default)
    {
        ObjectDisposedException.ThrowIf(_disposed, this);
        if (_process is not { } process)
        {
            return 0;
        }

        if (OperatingSystem.IsWindows())
        {
            await CrashAsync(cancellationToken).ConfigureAwait(false);
            return -1;
        }

        try
        {
            if (!process.HasExited)
            {
                using var kill = Process.Start("kill", ["-TERM", process.Id.ToString(CultureInfo.InvariantCulture)]);
                await kill.WaitForExitAsync(cancellationToken).ConfigureAwait(false);
            }

            await process.WaitForExitAsync(cancellationToken).ConfigureAwait(false);
            return process.ExitCode;
        }
        finally
        {
            if (!process.HasExited)
            {
                process.Kill(entireProcessTree: true);
            }

            process.Dispose();
            _process = null;
        }
    }

    /// <summary>Starts the service again on the same log directory and port, and waits until it is ready (recovered).</summary>
    /// <param name="cancellationToken">Stops waiting.</param>
    /// <exception cref="InvalidOperationException">The service is still running (crash or stop it first), or exited before it was ready.</exception>
    public Task RestartAsync(CancellationToken cancellationToken = default)
    {
        ObjectDisposedException.ThrowIf(_disposed, this);
        if (_process is not null)
        {
            throw new InvalidOperationException("The service is still running: call CrashAsync or StopAsync before RestartAsync.");
        }

        return LaunchAsync(cancellationToken);
    }

    /// <summary>
    /// Copies the log directory (while the service is not running: after <see cref="CrashAsync"/> or
    /// <see cref="StopAsync"/>) into <paramref name="destination"/>, for <c>ReplayCheck.RunAsync</c> or <c>psctl</c>.
    /// </summary>
    /// <param name="destination">A directory that does not exist yet, or is empty.</param>
    /// <returns>The full path of the copy.</returns>
    /// <exception cref="InvalidOperationException">The service is running.</exception>
    public string CopyLog(string destination)
    {
        ArgumentException.ThrowIfNullOrEmpty(destination);
        ObjectDisposedException.ThrowIf(_disposed, this);
        if (_process is not null)
        {
            throw new InvalidOperationException("Copy the log while the service is not running (after CrashAsync or StopAsync): a running service keeps writing it.");
        }

        var target = Path.GetFullPath(destination);
        foreach (var file in Directory.EnumerateFiles(LogDirectory, "*", SearchOption.AllDirectories))
        {
            var to = Path.Combine(target, Path.GetRelativePath(LogDirectory, file));
            Directory.CreateDirectory(Path.GetDirectoryName(to)!);
            File.Copy(file, to);
        }

        return target;
    }

    /// <summary>Kills the service if it runs and deletes the log directory if the kit created it.</summary>
    public async ValueTask DisposeAsync()
    {
        if (_disposed)
        {
            return;
        }

        await CrashAsync().ConfigureAwait(false);
        _disposed = true;
        HttpClient.Dispose();
        if (_ownsLogDirectory)
        {
            try
            {
                Directory.Delete(LogDirectory, recursive: true);
            }
            catch (IOException)
            {
            }
        }
    }

    private async Task LaunchAsync(CancellationToken cancellationToken)
    {
        var start = new ProcessStartInfo("dotnet")
        {
            RedirectStandardOutput = true,
            RedirectStandardError = true,
            UseShellExecute = false,
            WorkingDirectory = Path.GetDirectoryName(Path.GetFullPath(_options.AppPath))!,
        };
        start.ArgumentList.Add(Path.GetFullPath(_options.AppPath));
        start.ArgumentList.Add("--urls");
        start.ArgumentList.Add(BaseAddress.ToString().TrimEnd('/'));
        start.ArgumentList.Add("--PersistentServices:LogDirectory");
        start.ArgumentList.Add(LogDirectory);
        foreach (var argument in _options.Arguments)
        {
            start.ArgumentList.Add(argument);
        }

        start.Environment["DOTNET_NOLOGO"] = "1";
        start.Environment["PersistentServices__LogDirectory"] = LogDirectory;
        foreach (var (name, value) in _options.Environment)
        {
            start.Environment[name] = value;
        }

        Append($"--- start: dotnet {string.Join(' ', start.ArgumentList)}");
        var process = Process.Start(start) ?? throw new InvalidOperationException("dotnet could not be started.");
        _process = process;
        process.OutputDataReceived += (_, e) => Append(e.Data);
        process.ErrorDataReceived += (_, e) => Append(e.Data);
        process.BeginOutputReadLine();
        process.BeginErrorReadLine();
        await WaitUntilReadyAsync(process, cancellationToken).ConfigureAwait(false);
    }

    private async Task WaitUntilReadyAsync(Process process, CancellationToken cancellationToken)
    {
        var clock = Stopwatch.StartNew();
        while (clock.Elapsed < _options.StartTimeout)
        {
            cancellationToken.ThrowIfCancellationRequested();
            if (process.HasExited)
            {
                _process = null;
                throw new InvalidOperationException($"The service exited with code {process.ExitCode} before it was ready:\n{Output}");
            }

            try
            {
                using var probe = new CancellationTokenSource(TimeSpan.FromSeconds(5));
                using var linked = CancellationTokenSource.CreateLinkedTokenSource(probe.Token, cancellationToken);
                using var response = await HttpClient.GetAsync(new Uri(_options.ReadinessPath ?? "/", UriKind.Relative), linked.Token).ConfigureAwait(false);
                if (_options.ReadinessPath is null ? response.StatusCode != HttpStatusCode.ServiceUnavailable : response.StatusCode == HttpStatusCode.OK)
                {
                    return;
                }
            }
            catch (HttpRequestException)
            {
            }
            catch (OperationCanceledException) when (!cancellationToken.IsCancellationRequested)
            {
            }

            await Task.Delay(50, cancellationToken).ConfigureAwait(false);
        }

        throw new TimeoutException($"The service was not ready within {_options.StartTimeout.TotalSeconds} s:\n{Output}");
    }

    private void Append(string? line)
    {
        if (line is null)
        {
            return;
        }

        lock (_output)
        {
            _output.AppendLine(line);
        }
    }

    private static int FreePort()
    {
        using var listener = new TcpListener(IPAddress.Loopback, 0);
        listener.Start();
        return ((IPEndPoint)listener.LocalEndpoint).Port;
    }
}
