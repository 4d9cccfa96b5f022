using System.Collections.Concurrent;
using System.Diagnostics;
using System.Globalization;
using System.Net;
using System.Net.Sockets;

namespace PersistentServices.Tool.Tests.TestSupport;

/// <summary>
/// A service started as a child process (<c>dotnet APP.dll --urls http://127.0.0.1:PORT
/// --PersistentServices:LogDirectory=DIR</c>), its console output kept, killed with SIGKILL or left to exit.
/// </summary>
internal sealed class ServiceProcess : IAsyncDisposable
{
    private readonly Process _process;
    private readonly ConcurrentQueue<string> _output = new();

    private ServiceProcess(Process process, int port)
    {
        _process = process;
        Port = port;
        BaseAddress = new Uri($"http://127.0.0.1:{port.ToString(CultureInfo.InvariantCulture)}");
    }

    public int Port { get; }

    public Uri BaseAddress { get; }

    /// <summary>Everything the process wrote to stdout and stderr so far, line by line.</summary>
    public IReadOnlyList<string> Output => [.. _output];

    public bool HasExited => _process.HasExited;

    public int ExitCode => _process.ExitCode;

    public static ServiceProcess Start(string appPath, string logDirectory)
    {
        var port = FreePort();
        var process = new Process
        {
            StartInfo = new ProcessStartInfo("dotnet")
            {
                ArgumentList =
                {
                    appPath,
                    "--urls", $"http://127.0.0.1:{port.ToString(CultureInfo.InvariantCulture)}",
                    $"--PersistentServices:LogDirectory={logDirectory}",
                },
                RedirectStandardOutput = true,
                RedirectStandardError = true,
                UseShellExecute = false,
                Environment =
                {
                    ["ASPNETCORE_ENVIRONMENT"] = "Production",
                    ["DOTNET_ENVIRONMENT"] = "Production",
                    ["Logging__Console__FormatterName"] = "simple",
                },
            },
        };
        var service = new ServiceProcess(process, port);
        process.OutputDataReceived += (_, e) =>
        {
            if (e.Data is not null)
            {
                service._output.Enqueue(e.Data);
            }
        };
        process.ErrorDataReceived += (_, e) =>
        {
            if (e.Data is not null)
            {
                service._output.Enqueue(e.Data);
            }
        };
        process.Start();
        process.BeginOutputReadLine();
        process.BeginErrorReadLine();
        return service;
    }

    /// <summary>
    /// Waits until the service answers its readiness check with 200 (true) or the process exits (false).
    /// Throws <see cref="TimeoutException"/> after <paramref name="timeout"/>.
    /// </summary>
    public async Task<bool> WaitReadyOrExitAsync(HttpClient client, TimeSpan timeout, CancellationToken cancellationToken)
    {
        var clock = Stopwatch.StartNew();
        while (clock.Elapsed < timeout)
        {
            if (_process.HasExited)
            {
                await _process.WaitForExitAsync(cancellationToken);
                return false;
            }

            try
            {
                using var response = await client.GetAsync(new Uri(BaseAddress, "/health/ready"), cancellationToken);
                if (response.StatusCode == HttpStatusCode.OK)
                {
                    return true;
                }
            }
            catch (HttpRequestException)
            {
                // Not listening yet.
            }

            await Task.Delay(40, cancellationToken);
        }

        throw new TimeoutException($"the service neither became ready nor exited within {timeout.TotalSeconds:F0} s; output:{Environment.NewLine}{string.Join(Environment.NewLine, Output)}");
    }

    public async Task KillAsync()
    {
        if (!_process.HasExited)
        {
            _process.Kill(entireProcessTree: true); // SIGKILL on Linux
        }

        await _process.WaitForExitAsync();
    }

    public async ValueTask DisposeAsync()
    {
        await KillAsync();
        _process.Dispose();
    }

    private static int FreePort()
    {
        using var listener = new TcpListener(IPAddress.Loopback, 0);
        listener.Start();
        return ((IPEndPoint)listener.LocalEndpoint).Port;
    }
}
