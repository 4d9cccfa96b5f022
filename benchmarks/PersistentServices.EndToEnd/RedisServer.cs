using System.Diagnostics;
using System.Net.Sockets;

namespace PersistentServices.EndToEnd;

/// <summary>A redis-server child process on loopback, without persistence (an in-memory state server).</summary>
internal sealed class RedisServer : IDisposable
{
    private readonly Process _process;

    private RedisServer(Process process, string version)
    {
        _process = process;
        Version = version;
    }

    public string Version { get; }

    public static RedisServer Start(int port)
    {
        Process process;
        try
        {
            process = Process.Start(new ProcessStartInfo("redis-server", $"--port {port} --bind 127.0.0.1 --save \"\" --appendonly no")
            {
                RedirectStandardOutput = true,
                UseShellExecute = false,
            })!;
        }
        catch (System.ComponentModel.Win32Exception ex)
        {
            throw new InvalidOperationException("redis-server is not installed: apt-get install redis-server (or leave stateserver out of --configs)", ex);
        }
        for (var i = 0; i < 100; i++)
        {
            try
            {
                using var client = new TcpClient("127.0.0.1", port);
                break;
            }
            catch (SocketException)
            {
                Thread.Sleep(50);
            }
        }

        var version = Process.Start(new ProcessStartInfo("redis-server", "--version") { RedirectStandardOutput = true })!.StandardOutput.ReadToEnd().Split(' ').FirstOrDefault(p => p.StartsWith("v=", StringComparison.Ordinal)) ?? "?";
        return new RedisServer(process, version);
    }

    public void Dispose()
    {
        _process.Kill();
        _process.WaitForExit();
        _process.Dispose();
    }
}
