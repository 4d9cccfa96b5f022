using System.Diagnostics;
using System.Globalization;

namespace PersistentServices.CrashHarness;

/// <summary>
/// The service under test as a child process: starts it on a fixed loopback port and a log directory, waits until its
/// readiness endpoint answers 200, SIGKILLs it, and keeps the last lines of its output to show when something fails.
/// </summary>
internal sealed class ServiceProcess : IDisposable
{
    private const int KeptOutputLines = 200;

    private readonly Options _options;
    private readonly HttpClient _probe;
    private readonly Queue<string> _output = new();
    private readonly Lock _outputLock = new();
    private Process? _process;

    public ServiceProcess(Options options, int port)
    {
        _options = options;
        BaseAddress = new Uri($"http://127.0.0.1:{port.ToString(CultureInfo.InvariantCulture)}");
        _probe = new HttpClient { BaseAddress = BaseAddress, Timeout = TimeSpan.FromMilliseconds(Math.Min(1000, options.RequestTimeoutMs)) };
    }

    /// <summary>Where the service listens.</summary>
    public Uri BaseAddress { get; }

    /// <summary>How many times the process was started.</summary>
    public int Starts { get; private set; }

    /// <summary>True when the current process has exited (by itself or killed).</summary>
    public bool HasExited => _process is null || _process.HasExited;

    /// <summary>The exit code of the current process, once it has exited.</summary>
    public int? ExitCode => _process is { HasExited: true } p ? p.ExitCode : null;

    /// <summary>
    /// Starts the process on <paramref name="logDirectory"/> and waits until it is ready; returns the time from start
    /// to ready. Throws <see cref="InvalidOperationException"/> when it exits or does not become ready in time.
    /// </summary>
    public async Task<TimeSpan> StartAsync(string logDirectory, CancellationToken cancellationToken)
    {
        if (_process is { HasExited: false })
        {
            throw new InvalidOperationException("the service is already running");
        }

        _process?.Dispose();
        var start = new ProcessStartInfo(_options.Service)
        {
            RedirectStandardOutput = true,
            RedirectStandardError = true,
            UseShellExecute = false,
        };
        var port = BaseAddress.Port.ToString(CultureInfo.InvariantCulture);
        foreach (var argument in _options.ServiceArgs)
        {
            start.ArgumentList.Add(argument.Replace("{port}", port, StringComparison.Ordinal).Replace("{log-dir}", logDirectory, StringComparison.Ordinal));
        }

        if (_options.AppendArgs)
        {
            start.ArgumentList.Add("--urls");
            start.ArgumentList.Add(BaseAddress.ToString().TrimEnd('/'));
            start.ArgumentList.Add($"--PersistentServices:LogDirectory={logDirectory}");
        }

        var number = ++Starts;
        var process = new Process { StartInfo = start };
        process.OutputDataReceived += (_, e) => Keep(number, e.Data);
        process.ErrorDataReceived += (_, e) => Keep(number, e.Data);
        var clock = Stopwatch.StartNew();
        try
        {
            process.Start();
        }
        catch (Exception ex) when (ex is System.ComponentModel.Win32Exception or InvalidOperationException)
        {
            process.Dispose();
            throw new InvalidOperationException($"cannot start '{_options.Service}': {ex.Message}", ex);
        }

        _process = process;
        process.BeginOutputReadLine();
        process.BeginErrorReadLine();
        Keep(number, $"[harness] started pid {process.Id}: {_options.Service} {string.Join(' ', start.ArgumentList)}");

        var deadline = TimeSpan.FromSeconds(_options.ReadyTimeoutSeconds);
        while (clock.Elapsed < deadline)
        {
            if (process.HasExited)
            {
                await process.WaitForExitAsync(cancellationToken).ConfigureAwait(false);
                throw new InvalidOperationException($"the service (start #{number}) exited with code {process.ExitCode} before it was ready");
            }

            if (await IsReadyAsync(cancellationToken).ConfigureAwait(false))
            {
                return clock.Elapsed;
            }

            await Task.Delay(25, cancellationToken).ConfigureAwait(false);
        }

        throw new InvalidOperationException($"the service (start #{number}) was not ready after {_options.ReadyTimeoutSeconds} s");
    }

    /// <summary>SIGKILLs the process (and its children) and waits until it is gone.</summary>
    public async Task KillAsync(CancellationToken cancellationToken)
    {
        if (_process is not { } process)
        {
            return;
        }

        try
        {
            process.Kill(entireProcessTree: true); // SIGKILL on Linux
        }
        catch (InvalidOperationException)
        {
            // Already exited.
        }

        using var bound = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
        bound.CancelAfter(TimeSpan.FromSeconds(30));
        await process.WaitForExitAsync(bound.Token).ConfigureAwait(false);
        Keep(Starts, $"[harness] killed; exit code {process.ExitCode}");
    }

    /// <summary>The last lines the service printed, oldest first, each prefixed with its start number.</summary>
    public IReadOnlyList<string> RecentOutput()
    {
        lock (_outputLock)
        {
            return [.. _output];
        }
    }

    public void Dispose()
    {
        if (_process is { } process)
        {
            try
            {
                if (!process.HasExited)
                {
                    process.Kill(entireProcessTree: true);
                    process.WaitForExit(10_000);
                }
            }
            catch (InvalidOperationException)
            {
                // Already gone.
            }

            process.Dispose();
            _process = null;
        }

        _probe.Dispose();
    }

    private async Task<bool> IsReadyAsync(CancellationToken cancellationToken)
    {
        try
        {
            using var response = await _probe.GetAsync(_options.ReadyPath, cancellationToken).ConfigureAwait(false);
            return (int)response.StatusCode == 200;
        }
        catch (Exception ex) when (ex is HttpRequestException or IOException || (ex is OperationCanceledException && !cancellationToken.IsCancellationRequested))
        {
            return false;
        }
    }

    private void Keep(int start, string? line)
    {
        if (line is null)
        {
            return;
        }

        var text = $"[#{start.ToString(CultureInfo.InvariantCulture)}] {line}";
        if (_options.Verbose)
        {
            Console.WriteLine($"  service {text}");
        }

        lock (_outputLock)
        {
            if (_output.Count == KeptOutputLines)
            {
                _output.Dequeue();
            }

            _output.Enqueue(text);
        }
    }
}
