using System.Diagnostics;
using System.Net;
using System.Reflection;
using System.Security.Cryptography;
using System.Text;

namespace PersistentServices.ProcessTests;

/// <summary>
/// An encrypted log against a real service process (issue 32, build 5): the key comes from the environment, as a
/// Kubernetes Secret gives it (<c>PersistentServices__Log__Encryption__Key</c>, bound from configuration); after SIGKILL
/// the service without the key stops with the recovery exit code and one message naming the key id, changing nothing;
/// with the key it recovers every acknowledged request; <c>psctl verify --key-file</c> reads the log.
/// </summary>
[Trait("Category", "Process")]
public sealed class EncryptedLogTests : IDisposable
{
    private const string KeyVariable = "PersistentServices__Log__Encryption__Key";

    private static readonly string PsctlPath = typeof(EncryptedLogTests).Assembly.GetCustomAttributes<AssemblyMetadataAttribute>()
        .Single(a => a.Key == "PsctlPath").Value!;

    private readonly TempDirectory _dir = new();

    public void Dispose() => _dir.Dispose();

    private static string Fingerprint(string directory) => string.Join('\n', Directory.GetFiles(directory).Order(StringComparer.Ordinal)
        .Where(f => Path.GetFileName(f) != "directory.lock")
        .Select(f => $"{Path.GetFileName(f)} {new FileInfo(f).Length} {Convert.ToHexString(SHA256.HashData(File.ReadAllBytes(f)))}"));

    [Fact]
    public async Task KilledServiceWithAnEncryptedLog_WithoutItsKey_ExitsWithTheRecoveryCode_NamingTheKeyId_WithItRecoversEverything()
    {
        var key = Convert.ToBase64String(RandomNumberGenerator.GetBytes(32));
        var log = _dir.File("log");
        var withKey = new Dictionary<string, string> { ["PS_LOG_DIR"] = log, [KeyVariable] = key };
        string session;
        await using (var service = await ServiceProcess.StartAsync(withKey))
        {
            session = await service.StartSessionAsync();
            for (var i = 1; i <= 5; i++)
            {
                Assert.Equal(HttpStatusCode.OK, (await service.SendAsync(HttpMethod.Post, "/tally", session, i, new { account = "account-secret-5e1c", amount = 2 })).Status);
            }

            await service.KillAsync();
        }

        var files = string.Concat(Directory.GetFiles(log).Select(f => Encoding.Latin1.GetString(File.ReadAllBytes(f))));
        Assert.DoesNotContain("account-secret-5e1c", files, StringComparison.Ordinal);
        var before = Fingerprint(log);

        await using (var service = await ServiceProcess.StartAsync(new Dictionary<string, string> { ["PS_LOG_DIR"] = log }, waitUntilReady: false))
        {
            Assert.True(await service.WaitForExitAsync(TimeSpan.FromSeconds(60)), service.Output);
            Assert.Equal(70, service.ExitCode);
            Assert.Contains("PersistentServices refused to start", service.Output, StringComparison.Ordinal);
            Assert.Contains("is encrypted (key id ", service.Output, StringComparison.Ordinal);
            Assert.DoesNotContain(key, service.Output, StringComparison.Ordinal);
        }

        Assert.Equal(before, Fingerprint(log));

        var keyFile = _dir.File("log-key");
        await File.WriteAllTextAsync(keyFile, key + "\n", TestContext.Current.CancellationToken);
        var (exit, output) = await RunPsctlAsync("verify", log, "--key-file", keyFile);
        Assert.True(exit == 0, output);
        Assert.Contains("Encryption: records sealed with key ", output, StringComparison.Ordinal);
        Assert.Contains("; in clear 0", output, StringComparison.Ordinal);

        await using (var service = await ServiceProcess.StartAsync(withKey))
        {
            var (status, body, _) = await service.SendAsync(HttpMethod.Get, "/tally", session, null);
            Assert.Equal(HttpStatusCode.OK, status);
            Assert.Equal(10, body.GetProperty("count").GetInt64());
            Assert.Equal(5, body.GetProperty("ops").GetInt32());
        }
    }

    private static async Task<(int Exit, string Output)> RunPsctlAsync(params string[] args)
    {
        var start = new ProcessStartInfo("dotnet", [PsctlPath, .. args]) { RedirectStandardOutput = true, RedirectStandardError = true, UseShellExecute = false };
        using var process = Process.Start(start)!;
        var stdout = process.StandardOutput.ReadToEndAsync(TestContext.Current.CancellationToken);
        var stderr = process.StandardError.ReadToEndAsync(TestContext.Current.CancellationToken);
        await process.WaitForExitAsync(TestContext.Current.CancellationToken);
        return (process.ExitCode, await stdout + await stderr);
    }
}
