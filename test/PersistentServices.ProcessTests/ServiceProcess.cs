using System.Diagnostics;
using System.Net;
using System.Net.Http.Json;
using System.Reflection;
using System.Text;
using System.Text.Json;

namespace PersistentServices.ProcessTests;

/// <summary>The test service as a child process on 127.0.0.1: started, SIGKILLed, restarted on the same log directory.</summary>
internal sealed class ServiceProcess : IAsyncDisposable
{
    public static readonly string ServicePath = typeof(ServiceProcess).Assembly.GetCustomAttributes<AssemblyMetadataAttribute>()
        .Single(a => a.Key == "TestServicePath").Value!;

    private readonly Process _process;
    private readonly StringBuilder _output = new();

    private readonly IReadOnlyDictionary<string, string> _environment;

    private ServiceProcess(Process process, int port, IReadOnlyDictionary<string, string> environment)
    {
        _process = process;
        Port = port;
        _environment = environment;
        Client = new HttpClient { BaseAddress = new Uri($"http://127.0.0.1:{port}"), Timeout = TimeSpan.FromSeconds(60) };
    }

    public int Port { get; }

    /// <summary>
    /// <c>GET /ps/replication/status</c> signed as the group's nodes and psctl sign it (its <c>PS_PEER_KEY</c> and
    /// <c>PS_SERVICE_NAME</c>): a node shows its status to no one else (docs/replication.md, "The protocol").
    /// </summary>
    public Task<HttpResponseMessage> GetReplicationStatusAsync(CancellationToken cancellationToken = default)
    {
        var service = _environment.TryGetValue("PS_SERVICE_NAME", out var name) ? name : "PersistentServices.TestService";
        var key = _environment.TryGetValue("PS_PEER_KEY", out var k) ? k : "";
        var request = new HttpRequestMessage(HttpMethod.Get, "/ps/replication/status");
        request.Headers.Add("PS-Replication", "status");
        request.Headers.Add("PS-Caller", service);
        request.Headers.Add("PS-Callee", service);
        var message = new PersistentServices.Calls.PeerMessage("GET", "/ps/replication/status", service, service, "", "", "replication", "status", "");
        request.Headers.Add("PS-Signature", PersistentServices.Calls.PeerSignature.Sign(System.Text.Encoding.UTF8.GetBytes(key), DateTimeOffset.UtcNow.ToUnixTimeMilliseconds(),
            PersistentServices.Calls.PeerSignature.V2, message, []));
        return SendAndDisposeAsync(request, cancellationToken);
    }

    private async Task<HttpResponseMessage> SendAndDisposeAsync(HttpRequestMessage request, CancellationToken cancellationToken)
    {
        using (request)
        {
            return await Client.SendAsync(request, cancellationToken);
        }
    }

    public HttpClient Client { get; }

    /// <summary>Everything the service wrote to stdout and stderr so far.</summary>
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

    /// <summary>The process's resident set size now (VmRSS), in bytes.</summary>
    public long ResidentBytes()
    {
        foreach (var line in File.ReadLines($"/proc/{_process.Id}/status"))
        {
            if (line.StartsWith("VmRSS:", StringComparison.Ordinal))
            {
                return long.Parse(line.Split(' ', StringSplitOptions.RemoveEmptyEntries)[1], System.Globalization.CultureInfo.InvariantCulture) * 1024;
            }
        }

        return 0;
    }

    public bool HasExited => _process.HasExited;

    /// <summary>The operating system's id of the process (a node demoted in its process keeps it; a restarted one does not).</summary>
    public int ProcessId => _process.Id;

    /// <summary>The last <paramref name="chars"/> characters of <see cref="Output"/>, for failure messages.</summary>
    public string RecentOutput(int chars = 6000)
    {
        var output = Output;
        return output.Length <= chars ? output : output[^chars..];
    }

    public int ExitCode => _process.ExitCode;

    /// <summary>Sends a signal by name (<c>STOP</c> pauses the process, as a partition or a long pause looks from outside; <c>CONT</c> resumes it).</summary>
    public async Task SignalAsync(string signal)
    {
        using var kill = Process.Start("kill", [$"-{signal}", _process.Id.ToString(System.Globalization.CultureInfo.InvariantCulture)])!;
        await kill.WaitForExitAsync(TestContext.Current.CancellationToken);
    }

    public static Task<ServiceProcess> StartAsync(IReadOnlyDictionary<string, string> environment, bool waitUntilReady = true)
        => StartAsync(environment, FreePort(), waitUntilReady);

    /// <summary>Starts on a given port (a restarted service keeps its address, as callers know it).</summary>
    public static async Task<ServiceProcess> StartAsync(IReadOnlyDictionary<string, string> environment, int port, bool waitUntilReady = true)
    {
        var start = new ProcessStartInfo("dotnet", [ServicePath, "--urls", $"http://127.0.0.1:{port}"])
        {
            RedirectStandardOutput = true,
            RedirectStandardError = true,
            UseShellExecute = false,
            WorkingDirectory = Path.GetDirectoryName(ServicePath)!,
        };
        start.Environment["DOTNET_NOLOGO"] = "1";
        start.Environment["Logging__Console__FormatterName"] = "simple";
        foreach (var (name, value) in environment)
        {
            start.Environment[name] = value;
        }

        var process = Process.Start(start)!;
        var service = new ServiceProcess(process, port, environment);
        process.OutputDataReceived += (_, e) => service.Append(e.Data);
        process.ErrorDataReceived += (_, e) => service.Append(e.Data);
        process.BeginOutputReadLine();
        process.BeginErrorReadLine();
        if (waitUntilReady)
        {
            await service.WaitUntilReadyAsync();
        }

        return service;
    }

    /// <summary>Waits until the readiness check answers 200 (the log is open and scanned).</summary>
    public async Task WaitUntilReadyAsync()
    {
        var deadline = DateTime.UtcNow.AddSeconds(60);
        while (DateTime.UtcNow < deadline)
        {
            if (_process.HasExited)
            {
                throw new InvalidOperationException($"The service exited with {_process.ExitCode} before it was ready:\n{Output}");
            }

            try
            {
                using var response = await Client.GetAsync("/health/ready", TestContext.Current.CancellationToken);
                if (response.StatusCode == HttpStatusCode.OK)
                {
                    return;
                }
            }
            catch (HttpRequestException)
            {
            }

            await Task.Delay(100, TestContext.Current.CancellationToken);
        }

        throw new TimeoutException($"The service was not ready within 60 s:\n{Output}");
    }

    public async Task<string> StartSessionAsync()
    {
        using var response = await Client.PostAsync("/ps/sessions", null, TestContext.Current.CancellationToken);
        Assert.Equal(HttpStatusCode.Created, response.StatusCode);
        return (await response.Content.ReadFromJsonAsync<JsonElement>(TestContext.Current.CancellationToken)).GetProperty("sessionId").GetString()!;
    }

    /// <summary>Sends a persistent request (or a read-only one when <paramref name="sequence"/> is null).</summary>
    public async Task<(HttpStatusCode Status, JsonElement Body, HttpResponseMessage Response)> SendAsync(HttpMethod method, string path, string? session, long? sequence, object? json = null)
    {
        using var request = new HttpRequestMessage(method, path);
        if (session is not null)
        {
            request.Headers.TryAddWithoutValidation("PS-Session", session);
        }

        if (sequence is { } seq)
        {
            request.Headers.TryAddWithoutValidation("PS-Seq", seq.ToString(System.Globalization.CultureInfo.InvariantCulture));
        }

        if (json is not null)
        {
            request.Content = JsonContent.Create(json);
        }

        var response = await Client.SendAsync(request, TestContext.Current.CancellationToken);
        var text = await response.Content.ReadAsStringAsync(TestContext.Current.CancellationToken);
        var body = text.Length > 0 && response.Content.Headers.ContentType?.MediaType?.EndsWith("json", StringComparison.Ordinal) == true
            ? JsonDocument.Parse(text).RootElement.Clone()
            : default;
        return (response.StatusCode, body, response);
    }

    /// <summary>
    /// Sends a persistent request and resends it (the same number) while the service answers <c>503 reply-pending</c>: the
    /// request runs longer than the reply timeout (a domain's 2 s in the test service, on a loaded machine), and a resend
    /// gets its one reply. Any other answer is returned.
    /// </summary>
    public async Task<(HttpStatusCode Status, JsonElement Body, HttpResponseMessage Response)> SendUntilAnsweredAsync(string path, string session, long sequence, object json)
    {
        for (var attempt = 0; ; attempt++)
        {
            var reply = await SendAsync(HttpMethod.Post, path, session, sequence, json);
            var pending = reply.Status == HttpStatusCode.ServiceUnavailable && reply.Body.ValueKind == JsonValueKind.Object &&
                          reply.Body.TryGetProperty("type", out var type) && type.GetString()?.EndsWith("reply-pending", StringComparison.Ordinal) == true;
            if (!pending || attempt == 30)
            {
                return reply;
            }
        }
    }

    /// <summary>SIGTERM, as Kubernetes stops a pod: the host shuts down gracefully. Returns once the process exited.</summary>
    public async Task<int> TerminateAsync(TimeSpan timeout)
    {
        using (var kill = Process.Start("kill", ["-TERM", _process.Id.ToString(System.Globalization.CultureInfo.InvariantCulture)]))
        {
            await kill.WaitForExitAsync(TestContext.Current.CancellationToken);
        }

        using var cts = CancellationTokenSource.CreateLinkedTokenSource(TestContext.Current.CancellationToken);
        cts.CancelAfter(timeout);
        await _process.WaitForExitAsync(cts.Token);
        return _process.ExitCode;
    }

    /// <summary>Waits until the process exits by itself (a crash point killed it); false after <paramref name="timeout"/>.</summary>
    public async Task<bool> WaitForExitAsync(TimeSpan timeout)
    {
        using var cts = CancellationTokenSource.CreateLinkedTokenSource(TestContext.Current.CancellationToken);
        cts.CancelAfter(timeout);
        try
        {
            await _process.WaitForExitAsync(cts.Token);
            return true;
        }
        catch (OperationCanceledException) when (!TestContext.Current.CancellationToken.IsCancellationRequested)
        {
            return false;
        }
    }

    /// <summary>SIGKILL: no shutdown code runs.</summary>
    public async Task KillAsync()
    {
        if (!_process.HasExited)
        {
            _process.Kill(entireProcessTree: true);
        }

        await _process.WaitForExitAsync(TestContext.Current.CancellationToken);
    }

    private bool _disposed;

    public async ValueTask DisposeAsync()
    {
        if (_disposed)
        {
            return;
        }

        _disposed = true;
        Client.Dispose();
        if (!_process.HasExited)
        {
            _process.Kill(entireProcessTree: true);
            await _process.WaitForExitAsync();
        }

        // PS_TEST_OUTPUT_DIR keeps every service process's output (for investigating a failed crash run by hand).
        if (Environment.GetEnvironmentVariable("PS_TEST_OUTPUT_DIR") is { Length: > 0 } keep)
        {
            Directory.CreateDirectory(keep);
            await File.WriteAllTextAsync(
                System.IO.Path.Combine(keep, $"{DateTime.UtcNow:HHmmss.fff}-{Port}-{_process.Id}.log"), Output);
        }

        _process.Dispose();
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

    public static int FreePort() => TestSupport.LoopbackPorts.Free();
}

/// <summary>A temporary directory, deleted afterwards.</summary>
internal sealed class TempDirectory : IDisposable
{
    public string Path { get; } = Directory.CreateTempSubdirectory("ps-process-tests-").FullName;

    public string File(string name) => System.IO.Path.Combine(Path, name);

    public void Dispose()
    {
        try
        {
            Directory.Delete(Path, recursive: true);
        }
        catch (IOException)
        {
        }
    }
}
