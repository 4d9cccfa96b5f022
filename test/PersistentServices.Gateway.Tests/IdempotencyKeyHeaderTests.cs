using Microsoft.Extensions.Primitives;
using PersistentServices.Http.IdempotencyKeys;

namespace PersistentServices.Gateway.Tests;

/// <summary>The Idempotency-Key parser the gateway shares with the services (linked source): every spelling of one key is one key.</summary>
public sealed class IdempotencyKeyHeaderTests
{
    [Theory]
    [InlineData("K")]
    [InlineData("\"K\"")]
    [InlineData("  K ")]
    [InlineData(" \"K\"  ")]
    public void Spellings_OfOneKey_ParseToTheKey(string spelling)
    {
        Assert.Equal(IdempotencyKeyHeader.Syntax.Valid, IdempotencyKeyHeader.Parse(spelling, 255, out var key));
        Assert.Equal("K", key);
    }

    [Fact]
    public void AQuotedKey_KeepsItsEscapedCharacters()
    {
        Assert.Equal(IdempotencyKeyHeader.Syntax.Valid, IdempotencyKeyHeader.Parse("\"a\\\"b\\\\c, d\"", 255, out var key));
        Assert.Equal("a\"b\\c, d", key);
    }

    [Theory]
    [InlineData("a, b")]
    [InlineData("\"open")]
    [InlineData("a\"b")]
    [InlineData("\"\"")]
    [InlineData("")]
    [InlineData("\"bad\\escape\"")]
    [InlineData("caf\u00e9")]
    public void Malformed_IsMalformed(string value)
        => Assert.Equal(IdempotencyKeyHeader.Syntax.Malformed, IdempotencyKeyHeader.Parse(value, 255, out _));

    [Fact]
    public void TwoValues_OrTooLong_AreMalformed_NoneIsAbsent()
    {
        Assert.Equal(IdempotencyKeyHeader.Syntax.Malformed, IdempotencyKeyHeader.Parse(new StringValues(["a", "b"]), 255, out _));
        Assert.Equal(IdempotencyKeyHeader.Syntax.Malformed, IdempotencyKeyHeader.Parse(new string('k', 9), 8, out _));
        Assert.Equal(IdempotencyKeyHeader.Syntax.Absent, IdempotencyKeyHeader.Parse(StringValues.Empty, 255, out _));
    }
}
