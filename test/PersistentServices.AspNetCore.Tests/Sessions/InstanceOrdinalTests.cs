using System.Buffers.Text;
using System.Net;
using PersistentServices.AspNetCore.Tests.TestSupport;
using PersistentServices.Hosting;
using PersistentServices.Sessions;

namespace PersistentServices.AspNetCore.Tests.Sessions;

/// <summary>
/// <c>PersistentServicesOptions.InstanceOrdinal</c>: the session ids an instance starts name it in their first byte, so a
/// gateway routes a session to its owner without a table (docs/gateway.md, docs/protocol.md).
/// </summary>
public sealed class InstanceOrdinalTests : IDisposable
{
    private readonly TempDirectory _dir = new();

    public void Dispose() => _dir.Dispose();

    [Theory]
    [InlineData(0)]
    [InlineData(2)]
    [InlineData(255)]
    public void NewRandom_WithAnOrdinal_FirstByteIsTheOrdinal_TheRestRandom(int ordinal)
    {
        var ids = Enumerable.Range(0, 64).Select(_ => SessionId.NewRandom((byte)ordinal)).ToList();

        Assert.All(ids, id => Assert.Equal((byte)ordinal, id.FirstByte));
        Assert.All(ids, id => Assert.Equal((byte)ordinal, Base64Url.DecodeFromChars(id.ToString())[0]));
        Assert.Equal(ids.Count, ids.Distinct().Count());
        // 120 random bits: across 64 ids every one of the 15 other bytes takes more than one value.
        for (var i = 1; i < 16; i++)
        {
            Assert.True(ids.Select(id => id.ToBytes()[i]).Distinct().Count() > 1, $"byte {i} never changed");
        }
    }

    [Fact]
    public void NewRandom_WithoutAnOrdinal_FirstByteIsRandom()
    {
        var firstBytes = Enumerable.Range(0, 256).Select(_ => SessionId.NewRandom().FirstByte).Distinct().Count();

        Assert.True(firstBytes > 1);
    }

    [Theory]
    [InlineData(-1)]
    [InlineData(256)]
    public void OutOfRange_IsRefused_NamingTheOption(int ordinal)
    {
        var options = new PersistentServicesOptions { LogDirectory = _dir.Path, ServiceName = "A", InstanceOrdinal = ordinal };

        var result = new PersistentServicesOptionsValidator().Validate(null, options);

        Assert.True(result.Failed);
        Assert.Contains(result.Failures!, f => f.Contains("PersistentServicesOptions.InstanceOrdinal must be between 0 and 255", StringComparison.Ordinal));
    }

    [Theory]
    [InlineData(null)]
    [InlineData(0)]
    [InlineData(255)]
    public void InRange_OrNull_IsValid(int? ordinal)
    {
        var options = new PersistentServicesOptions { LogDirectory = _dir.Path, ServiceName = "A", InstanceOrdinal = ordinal };

        var result = new PersistentServicesOptionsValidator().Validate(null, options);

        Assert.True(result.Succeeded, string.Join("\n", result.Failures ?? []));
    }

    [Fact]
    public async Task SessionStart_WithAnOrdinal_TheIdNamesTheInstance()
    {
        await using var server = await TestServer.StartAsync(_dir.Path, o => o.InstanceOrdinal = 7);

        for (var i = 0; i < 8; i++)
        {
            using var response = await server.Client.PostAsync("/ps/sessions", null, TestContext.Current.CancellationToken);
            Assert.Equal(HttpStatusCode.Created, response.StatusCode);
            var id = response.Headers.GetValues("PS-Session").Single();
            Assert.Equal(7, Base64Url.DecodeFromChars(id)[0]);
        }
    }
}
